"""In-flight failover for streams: what a relayed stream has given its client, and how to go on.

A stream whose replica dies or hangs after its first byte can't be retried from the start (the
client has part of the answer), so the router resumes it: it asks every resumable stream for its
token ids (`return_token_ids`, stripped again before the client sees them unless it asked too),
keeps the ids of every chunk it relayed, and on a failure sends the request to another replica as
a *continuation* of those ids (engine/inputs/continuation.py). The new replica's chunks are
rewritten to the first one's `id` and `created`, so the client reads one uninterrupted stream.
The relay and the resumption themselves are router/http/stream_failover.py.

    resumable   a streamed chat or completions request for one choice (n = 1, one prompt) that
                is not itself a continuation; any other stream ends with an error event
    a cut       only between two SSE events: the ids relayed are exactly those of the text relayed
    not resumed a stream whose choice already finished (its [DONE] is sent), an engine's own
                error event, a replica that does not acknowledge the continuation
    same weights a stream goes on only on a replica whose root hash (its weights' identity) is the
                one it began on: never a silent switch of model revision mid-answer
    a handoff   a draining engine ends a stream it can't finish by its deadline with
                HANDOFF_EVENT (no [DONE]): resumed as a failure is, the event never relayed
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from fastapi import Request

from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.protocol.openai import HANDOFF_EVENT
from pagedock.protocol.responses import ResponsesRequest
from router.policies.dispatcher import Decision
from router.replicas.replica import Replica

_DONE = b"data: [DONE]"
_DATA = b"data: "
_HANDOFF = HANDOFF_EVENT.encode().rstrip(b"\n")


@dataclass
class ResumePlan:
    """A resumable stream's request, as its first replica gets it (the client's JSON with
    `return_token_ids`), and whether the client wants token ids.

    NOTE: kept as bytes, not parsed: it lasts as long as the stream, and a parsed request costs
    up to ten times its body (router/http/body_budget.py)."""

    first_body: bytes
    client_wants_token_ids: bool

    @classmethod
    def of(cls, request: dict[str, Any], client_wants_token_ids: bool) -> ResumePlan:
        """The plan for the client's `request` (parsed JSON)."""
        first = {**request, "return_token_ids": True}
        return cls(_dumps(first), client_wants_token_ids)

    def body(self, prior_token_ids: list[int] | None = None) -> bytes:
        """The request as a replica gets it: with token ids, and as a continuation of
        `prior_token_ids` when given."""
        if not prior_token_ids:
            return self.first_body
        # NOTE: spliced, not re-parsed: `first_body` is a JSON object this module wrote, with
        # return_token_ids and without continuation (a client's is refused before a plan).
        continuation = _dumps({"token_ids": prior_token_ids})
        return self.first_body[:-1] + b',"continuation":' + continuation + b"}"


def resume_plan(
    parsed: ChatCompletionRequest | CompletionRequest | ResponsesRequest | None, body: bytes
) -> ResumePlan | None:
    """The plan for a request the router can resume mid-stream, or None (a Responses API
    stream: its events are not the chunks a continuation rewrites)."""
    if isinstance(parsed, ResponsesRequest):
        return None
    if parsed is None or not parsed.stream or parsed.n != 1 or parsed.continuation is not None:
        return None
    if isinstance(parsed, CompletionRequest) and not _is_one_prompt(parsed.prompt):
        return None
    request = json.loads(body)
    return ResumePlan.of(request, bool(request.get("return_token_ids")))


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _is_one_prompt(prompt: object) -> bool:
    return isinstance(prompt, str) or (
        isinstance(prompt, list) and (not prompt or isinstance(prompt[0], int))
    )


@dataclass
class StreamTranscript:
    """What the client has been sent of one stream, event by event, across replicas."""

    plan: ResumePlan
    token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    """The choice has its finish_reason: nothing is left to generate."""
    done: bool = False
    """[DONE] was relayed: the stream is whole."""
    resumable: bool = True
    """False after an engine's error event or a chunk without token ids (another engine)."""
    handed_off: bool = False
    """The replica, draining, handed the stream off at its deadline (HANDOFF_EVENT)."""
    _identity: dict[str, Any] | None = None
    _pending: bytes = b""
    _segment: int = 0

    def next_segment(self) -> None:
        """The chunks that follow come from a continuation on another replica."""
        self._segment += 1
        self._pending = b""  # an event the failed replica cut off is dropped whole

    def feed(self, data: bytes) -> bytes:
        """The complete events in `data` (and what came before it), as the client gets them."""
        data = self._pending + data
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        self._pending = data[end + 2 :]
        events = data[: end + 2].split(b"\n\n")[:-1]
        return b"".join(e + b"\n\n" for e in map(self._event, events) if e)

    def _event(self, event: bytes) -> bytes:
        if event.startswith(_DONE):
            self.done = True
            return event
        if event == _HANDOFF:
            self.handed_off = True
            return b""  # the router's business, not the client's
        if not event.startswith(_DATA):
            return event  # a comment or a field this relay has no use for
        try:
            chunk = json.loads(event[len(_DATA) :])
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict) or "error" in chunk:
            self.resumable = False
            return event
        changed = self._record(chunk)
        if not changed:
            return event
        return _DATA + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode()

    def _record(self, chunk: dict[str, Any]) -> bool:
        """Take the chunk's token ids and finish; strip what the client didn't ask for and give
        a continuation's chunk the stream's identity. True when the chunk changed."""
        changed = False
        if self._identity is None:
            self._identity = {"id": chunk.get("id"), "created": chunk.get("created")}
        elif self._segment:
            chunk.update(self._identity)
            changed = True
        if "prompt_token_ids" in chunk and (self._segment or not self.plan.client_wants_token_ids):
            del chunk["prompt_token_ids"]
            changed = True
        for choice in chunk.get("choices") or ():
            ids = choice.get("token_ids")
            if ids is None:
                self.resumable = False
            else:
                self.token_ids.extend(ids)
                if not self.plan.client_wants_token_ids:
                    del choice["token_ids"]
                    changed = True
            if choice.get("finish_reason") is not None:
                self.finished = True
        return changed


@dataclass
class Resumable:
    """What resuming a stream elsewhere needs: the request, its headers, blocks and plan."""

    request: Request
    headers: dict[str, str]
    decision: Decision
    plan: ResumePlan


@dataclass
class Segment:
    """One replica's part of a stream: its first chunk, the rest, and its accounting."""

    first: bytes
    chunks: AsyncIterator[bytes]
    upstream: aiohttp.ClientResponse
    replica: Replica
    request_id: str
    failure: str | None = None
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.replica.end(self.request_id)
            self.upstream.close()  # a client that left closes the replica's connection: it aborts
