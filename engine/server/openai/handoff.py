"""Handing off streams at the drain deadline (docs/router.md#rollouts).

A draining engine lets its streams finish until --drain-timeout; what is still running then is
aborted. A stream that asked for its token ids (`return_token_ids`, as a router asks for every
stream it can resume) for one choice is not ended with `finish_reason: abort` and `[DONE]` but
handed off: it ends with HANDOFF_EVENT and without `[DONE]`, and the router goes on from another
replica serving the same weights, as a continuation of the ids it relayed, in the same client
stream. Any other stream ends as an aborted one, as before.

A non-streamed request aborted then has sent nothing yet, so it is not answered as a 200 with
`finish_reason: abort` (a cut answer a client would take as whole) but with `cut_by_drain()`'s
503: a router retries it on another replica (router/http/upstream_errors.py), a client may
retry it after Retry-After.
"""

from __future__ import annotations

from pagedock.http.errors import APIError


class HandedOff(Exception):
    """The stream's request was aborted at the drain deadline and is to be resumed elsewhere."""


def hands_off(return_token_ids: bool, num_choices: int) -> bool:
    """Can a router resume this stream: it carries its token ids, for one choice."""
    return return_token_ids and num_choices == 1


def cut_by_drain() -> APIError:
    """The answer to a non-streamed request the drain deadline aborted."""
    return APIError(
        503,
        "the server shut down before this request finished (its drain deadline passed); "
        "retry it, another replica will serve it",
        code="draining",
        headers={"Retry-After": "1"},
    )
