"""Continuations: a request that resumes one completion after tokens generated before, elsewhere
(a replica that failed mid-stream; the router's in-flight failover, docs/router.md).

The prior tokens are output, not prompt. The scheduler recomputes their KV like a preempted
request's and every rule that reads a request's output counts them: max_tokens, min_tokens,
penalties, the seeded sampler's position (engine/sampling/step_seed.py: O(1), no replayed draws)
and, in the output path, stop strings and held-back text (IncrementalDetokenizer.replay). Outputs
carry only what is generated from here on. Only the fleet's routers may send one, when the engine
has an internal key (pagedock/http/internal_key.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.inputs.sampling_params import SamplingParams
from pagedock.errors import InvalidRequestError


def check_continuation(
    prior: Sequence[int], params: SamplingParams, vocab_size: int, room: int
) -> list[int]:
    """The prior output as a list: one completion's (n == 1), ids in the vocabulary, fewer than
    `room` (the tokens the request may generate in all) so that one is left to generate. One of
    the InputProcessor's checks (engine/inputs/input_processor.py), called from there only."""
    prior = list(prior)
    if not prior:
        return prior
    if params.n != 1:
        raise InvalidRequestError("a continuation resumes one completion: n must be 1", "n")
    bad = [t for t in prior if not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"continuation token ids must be in [0, {vocab_size}); got {bad[:5]}", "continuation"
        )
    if len(prior) >= room:
        raise InvalidRequestError(
            f"the continuation already has {len(prior)} generated tokens, leaving none to "
            f"generate within max_tokens and the context length ({room} in all)",
            "continuation",
        )
    return prior
