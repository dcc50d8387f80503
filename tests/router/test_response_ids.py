"""Reading the response id of an answer to POST /v1/responses as it passes: at once from JSON,
from a stream's first event without holding a chunk back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import Response
from fastapi.responses import StreamingResponse

from router.http.response_ids import MAX_FIRST_EVENT_BYTES, ResponseIdReader, learn_response_id

RESPONSE = {"id": "resp_abc", "object": "response", "status": "in_progress", "output": []}
CREATED = (
    "event: response.created\n"
    f"data: {json.dumps({'type': 'response.created', 'sequence_number': 0, 'response': RESPONSE})}"
    "\n\n"
).encode()
DELTA = b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta"}\n\n'


def learnt(response: Response) -> list[str]:
    found: list[str] = []
    learn_response_id(response, found.append)
    return found


def test_a_json_answer_teaches_its_id() -> None:
    assert learnt(Response(json.dumps(RESPONSE), 200)) == ["resp_abc"]


def test_an_error_or_another_object_teaches_nothing() -> None:
    assert learnt(Response(json.dumps({"error": {"message": "no"}}), 400)) == []
    assert learnt(Response(json.dumps({**RESPONSE, "object": "list"}), 200)) == []
    assert learnt(Response(b"not json", 200)) == []


def relayed(chunks: list[bytes], found: list[str], seen: list[int]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk
            seen.append(len(found))  # what had been learnt when the next chunk was asked for

    response = StreamingResponse(body(), media_type="text/event-stream")
    return learn_response_id(response, found.append)  # type: ignore[return-value]


async def drain(response: StreamingResponse) -> list[bytes]:
    return [bytes(chunk) async for chunk in response.body_iterator]  # type: ignore[arg-type]


def test_a_streams_first_event_teaches_its_id_and_every_chunk_passes_unchanged() -> None:
    # The first event cut into pieces of 7 bytes (its end, "\n\n", split between two of them).
    stream = CREATED + DELTA
    chunks = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    found: list[str] = []
    seen: list[int] = []
    assert asyncio.run(drain(relayed(chunks, found, seen))) == chunks
    assert found == ["resp_abc"]
    # Learnt as the chunk ending the first event passed, not at the stream's end.
    assert seen.index(1) == (len(CREATED) - 1) // 7


def test_each_chunk_is_passed_on_before_the_next_is_read() -> None:
    found: list[str] = []
    read: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        for chunk in (CREATED[:10], CREATED[10:], DELTA):
            read.append(chunk)
            yield chunk

    async def first_two() -> list[bytes]:
        response = learn_response_id(StreamingResponse(body()), found.append)
        chunks = response.body_iterator.__aiter__()  # type: ignore[attr-defined]
        got = [await anext(chunks)]
        assert len(read) == 1  # nothing read ahead: the client has the first chunk already
        got.append(await anext(chunks))
        await chunks.aclose()
        return got

    assert asyncio.run(first_two()) == [CREATED[:10], CREATED[10:]]
    assert found == ["resp_abc"]


def test_a_stream_whose_first_event_is_not_response_created_teaches_nothing() -> None:
    found: list[str] = []
    assert asyncio.run(drain(relayed([DELTA, CREATED], found, []))) == [DELTA, CREATED]
    assert found == []


def test_a_first_event_past_the_bound_is_given_up_on() -> None:
    found: list[str] = []
    huge = b"data: " + b"x" * MAX_FIRST_EVENT_BYTES
    chunks = [huge, CREATED]
    assert asyncio.run(drain(relayed(chunks, found, []))) == chunks
    assert found == []


def test_closing_the_stream_closes_the_relay_under_it() -> None:
    closed: list[bool] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            yield CREATED
            yield DELTA
        finally:
            closed.append(True)

    async def leave_early() -> None:
        response = learn_response_id(StreamingResponse(body()), lambda _: None)
        chunks = response.body_iterator.__aiter__()  # type: ignore[attr-defined]
        await anext(chunks)
        await chunks.aclose()  # the client went away after the first chunk

    asyncio.run(leave_early())
    assert closed == [True]


def test_a_reader_fed_frame_by_frame_reads_either_kind_and_gives_up_past_the_limit() -> None:
    stream = ResponseIdReader(stream=True)
    assert [stream.feed(CREATED[i : i + 9], False) for i in range(0, len(CREATED), 9)][-1] == (
        "resp_abc"
    )
    assert stream.done and stream.feed(CREATED, True) is None
    answer = json.dumps(RESPONSE).encode()
    reader = ResponseIdReader(stream=False)
    assert (reader.feed(answer[:10], False), reader.feed(answer[10:], True)) == (None, "resp_abc")
    huge = ResponseIdReader(stream=False)
    assert huge.feed(b" " * (MAX_FIRST_EVENT_BYTES + 1), False) is None and huge.done
    assert huge.feed(answer, True) is None
