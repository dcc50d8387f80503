"""How the SmolLM2 router scenario's client reads a streamed chat completion
(benchmarks/router_client.py): first token, usage, rejections and errors."""

from __future__ import annotations

import asyncio
import json

import httpx

from benchmarks.router_client import Outcome, request_body, stream_chat


def sse(*events: dict) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    )


def chunk(content: str | None = None, role: str | None = None) -> dict:
    delta = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    return {"choices": [{"index": 0, "delta": delta}]}


USAGE = {
    "choices": [],
    "usage": {
        "prompt_tokens": 40,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 32},
    },
}


def send(response: httpx.Response) -> Outcome:
    async def go() -> Outcome:
        transport = httpx.MockTransport(lambda request: response)
        async with httpx.AsyncClient(transport=transport) as client:
            return await stream_chat(
                client, "http://replica", request_body([{"role": "user", "content": "hi"}], 2)
            )

    return asyncio.run(go())


def test_a_streamed_answer_gives_its_first_token_time_and_usage() -> None:
    outcome = send(
        httpx.Response(
            200, content=sse(chunk("", role="assistant"), chunk("Hel"), chunk("lo"), USAGE)
        )
    )
    assert outcome.status == "ok"
    assert outcome.ttft_s is not None and 0 <= outcome.ttft_s <= outcome.e2e_s
    assert (outcome.num_output_tokens, outcome.num_cached_tokens) == (2, 32)


def test_the_router_s_replica_and_predicted_cached_tokens_are_kept() -> None:
    headers = {
        "x-pagedock-replica": "http://127.0.0.1:8001",
        "x-pagedock-predicted-cached-tokens": "32",
    }
    outcome = send(httpx.Response(200, headers=headers, content=sse(chunk("Hi"), USAGE)))
    assert (outcome.replica, outcome.predicted_cached_tokens) == ("http://127.0.0.1:8001", 32)


def test_a_role_chunk_alone_is_not_a_first_token() -> None:
    outcome = send(httpx.Response(200, content=sse(chunk("", role="assistant"), USAGE)))
    assert outcome.ttft_s is None


def test_429_and_503_are_rejections_other_statuses_errors() -> None:
    assert send(httpx.Response(429, json={"error": {"message": "busy"}})).status == "rejected"
    assert send(httpx.Response(503, json={"error": {"message": "draining"}})).status == "rejected"
    failed = send(httpx.Response(500, json={"error": {"message": "boom"}}))
    assert failed.status == "error" and "HTTP 500" in (failed.detail or "")


def test_an_error_event_in_the_stream_fails_the_request() -> None:
    outcome = send(
        httpx.Response(200, content=sse(chunk("Hel"), {"error": {"message": "engine died"}}))
    )
    assert outcome.status == "error" and outcome.detail == "engine died"


def test_the_request_streams_a_fixed_number_of_tokens_with_usage() -> None:
    body = request_body([{"role": "user", "content": "hi"}], 24)
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["ignore_eos"], body["temperature"]) == (24, True, 0.0)
