"""A draining engine's handoff, as the router's transcript reads it: the handoff event ends the
replica's part of the stream, is never relayed to the client, and leaves the stream resumable."""

from __future__ import annotations

import json

from pagedock.protocol.openai import HANDOFF_EVENT
from router.http.stream_resume import ResumePlan, StreamTranscript


def chunk(text: str, ids: list[int]) -> bytes:
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": None}
    payload = {"id": "cmpl-1", "created": 1, "choices": [choice]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def transcript() -> StreamTranscript:
    return StreamTranscript(ResumePlan.of({"prompt": "x", "stream": True}, False))


def test_the_handoff_event_is_taken_not_relayed() -> None:
    t = transcript()
    relayed = t.feed(chunk("a", [5]) + chunk("b", [6]) + HANDOFF_EVENT.encode())
    assert relayed.count(b"data: ") == 2 and b"handoff" not in relayed
    assert t.handed_off and t.resumable and not t.done and not t.finished
    assert t.token_ids == [5, 6]


def test_a_handoff_split_across_reads_is_still_seen() -> None:
    t = transcript()
    event = HANDOFF_EVENT.encode()
    assert t.feed(chunk("a", [5]) + event[:5]).count(b"data: ") == 1
    assert t.feed(event[5:]) == b""
    assert t.handed_off


def test_other_comments_still_reach_the_client() -> None:
    t = transcript()
    assert t.feed(b": keep-alive\n\n") == b": keep-alive\n\n"
    assert not t.handed_off
