"""The id of the response a replica's answer to POST /v1/responses carries, read as the answer
passes through the router (router/policies/response_owners.py remembers where it was made).

    a JSON answer (200)   its top-level `id` (`object: "response"`)
    a stream              the first event, `response.created`: its `response.id`. The chunks go
                          on to the client as they come; a copy of the first event's bytes is
                          kept until it ends (at most MAX_FIRST_EVENT_BYTES), then nothing more
                          is looked at.

An answer whose id can't be read (not JSON, an error, a first event too large) teaches nothing:
a follow-up to it is routed by the policy.

The endpoint picker, which sees an answer only as the body frames the gateway shows it, reads it
with a ResponseIdReader: the same rules, fed frame by frame (a JSON answer is kept until its end,
at most MAX_FIRST_EVENT_BYTES).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse

MAX_FIRST_EVENT_BYTES = 1 << 20
"""A first event echoes the request's instructions and tools: a megabyte is a very long one."""
_EVENT_ENDS = (b"\n\n", b"\r\n\r\n")
Chunk = str | bytes | memoryview


def learn_response_id(response: Response, learn: Callable[[str], None]) -> Response:
    """`response`, whose response id (when it carries one) is passed to `learn`: at once for a
    JSON answer, as its first event passes for a stream."""
    if isinstance(response, StreamingResponse):
        response.body_iterator = _watched(response.body_iterator, learn)
    elif response.status_code == 200:
        found = _json_id(bytes(response.body))
        if found is not None:
            learn(found)
    return response


class ResponseIdReader:
    """An answer's response id, read from its bytes as they come: `feed` each piece (`last` on
    the final one) until it returns the id; after None with `done` set, nothing more is read."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.done = False
        self._first = _FirstEvent() if stream else None
        self._body = bytearray()

    def feed(self, piece: bytes, last: bool) -> str | None:
        if self.done:
            return None
        if self._first is not None:
            if self._first.add(piece) or last:
                self.done = True
                return self._first.response_id()
            return None
        self._body += piece
        if len(self._body) > MAX_FIRST_EVENT_BYTES:
            self.done, self._body = True, bytearray()
        elif last:
            self.done = True
            return _json_id(bytes(self._body))
        return None


async def _watched(
    chunks: AsyncIterable[Chunk], learn: Callable[[str], None]
) -> AsyncIterator[Chunk]:
    """The chunks, unchanged and unheld, with the first event's response id passed to `learn`."""
    first: _FirstEvent | None = _FirstEvent()
    try:
        async for chunk in chunks:
            if first is not None and first.add(chunk.encode() if isinstance(chunk, str) else chunk):
                found, first = first.response_id(), None
                if found is not None:
                    learn(found)
            yield chunk
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:  # the relay's own cleanup (the replica's connection) runs now
            await close()


class _FirstEvent:
    """The bytes of a stream's first event, as they arrive."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.end: int | None = None

    def add(self, chunk: bytes | memoryview) -> bool:
        """Take the next chunk; True once nothing more is needed (the event ended, or is past
        MAX_FIRST_EVENT_BYTES). Each byte is searched once or twice, never the whole head again."""
        start = max(0, len(self.head) - 3)  # an event's end may straddle two chunks
        self.head += chunk
        ends = [i for i in (self.head.find(end, start) for end in _EVENT_ENDS) if i >= 0]
        if ends:
            self.end = min(ends)
        return self.end is not None or len(self.head) > MAX_FIRST_EVENT_BYTES

    def response_id(self) -> str | None:
        return None if self.end is None else _event_id(bytes(self.head[: self.end]))


def _event_id(event: bytes) -> str | None:
    """`response.id` of a `response.created` event (its `data:` lines joined, as SSE joins them)."""
    lines = event.decode("utf-8", "replace").splitlines()
    data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
    fields = _object(data)
    if fields is None or fields.get("type") != "response.created":
        return None
    response = fields.get("response")
    return _id_of(response) if isinstance(response, dict) else None


def _json_id(body: bytes) -> str | None:
    fields = _object(body)
    return None if fields is None else _id_of(fields)


def _id_of(response: dict[str, Any]) -> str | None:
    found = response.get("id")
    return found if response.get("object") == "response" and isinstance(found, str) else None


def _object(text: str | bytes) -> dict[str, Any] | None:
    try:
        fields = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    return fields if isinstance(fields, dict) else None
