"""Token ids in responses (`return_token_ids`, as vLLM) and continuations: a stream resumed after
tokens generated before, elsewhere (the router's in-flight failover, docs/router.md).

A continuation's prior tokens are output, not prompt: resuming at any cut gives the tokens and the
text the uninterrupted stream would have gone on with — greedy, seeded, with penalties, and with a
stop string that spans the cut — and its usage counts the whole completion.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.server.server_process import ServerProcess
from tests.tiny_model import TINY_VOCAB

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def http(tiny_server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=tiny_server.url, timeout=60)


def stream_events(http: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every data event of a stream, parsed, up to [DONE]."""
    events = []
    with http.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[len("data: ") :]))
    return events


def chat_body(model: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Paged attention keeps"}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
        "return_token_ids": True,
        **extra,
    }


def text_and_ids(events: list[dict[str, Any]]) -> tuple[str, list[int]]:
    text, ids = "", []
    for event in events:
        for choice in event["choices"]:
            text += choice["delta"].get("content") or ""
            ids += choice.get("token_ids") or []
    return text, ids


def cut_at(events: list[dict[str, Any]], num_tokens: int) -> tuple[str, int]:
    """Where a router could cut the stream near `num_tokens` ids: the last chunk boundary at or
    before it (after the first chunk with ids at the earliest), as the text and number of ids the
    client had there. A loaded server may put several tokens in one chunk."""
    text, seen = "", 0
    for event in events:
        for choice in event["choices"]:
            ids = choice.get("token_ids") or []
            if seen and seen + len(ids) > num_tokens:
                return text, seen
            text += choice["delta"].get("content") or ""
            seen += len(ids)
    return text, seen


def test_token_ids_are_in_responses_only_when_asked_for(
    http: httpx.Client, model_name: str
) -> None:
    body = chat_body(model_name)
    asked = http.post("/v1/chat/completions", json=body).json()
    assert len(asked["choices"][0]["token_ids"]) == MAX_TOKENS
    assert asked["prompt_token_ids"] and all(isinstance(t, int) for t in asked["prompt_token_ids"])
    plain = http.post("/v1/chat/completions", json={**body, "return_token_ids": False}).json()
    assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain
    streamed = stream_events(http, "/v1/chat/completions", body)
    assert streamed[0]["prompt_token_ids"] == asked["prompt_token_ids"]
    assert streamed[1].get("prompt_token_ids") is None
    assert text_and_ids(streamed) == (
        asked["choices"][0]["message"]["content"],
        asked["choices"][0]["token_ids"],
    )


@pytest.mark.parametrize("cut", [1, 9, MAX_TOKENS - 6])
@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 0},
        {"temperature": 1.0, "seed": 1234},  # the seeded draws go on where they stood
        {"temperature": 0, "frequency_penalty": 1.5, "presence_penalty": 0.5},
    ],
    ids=["greedy", "seeded", "penalties"],
)
def test_a_continuation_goes_on_as_the_uninterrupted_stream_would(
    http: httpx.Client, model_name: str, cut: int, sampling: dict[str, Any]
) -> None:
    body = chat_body(model_name, **sampling, stream_options={"include_usage": True})
    whole = stream_events(http, "/v1/chat/completions", body)
    whole_text, whole_ids = text_and_ids(whole)
    had, cut = cut_at(whole, cut)
    resumed = stream_events(
        http, "/v1/chat/completions", {**body, "continuation": {"token_ids": whole_ids[:cut]}}
    )
    text, ids = text_and_ids(resumed)
    assert ids == whole_ids[cut:]
    assert had + text == whole_text
    assert all(c["delta"].get("role") is None for e in resumed for c in e["choices"])
    assert resumed[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    assert resumed[-2]["choices"][0]["finish_reason"] == "length"


def test_a_stop_string_spanning_the_cut_still_ends_the_continuation(
    http: httpx.Client, model_name: str
) -> None:
    whole = stream_events(http, "/v1/chat/completions", chat_body(model_name))
    whole_text, whole_ids = text_and_ids(whole)
    # A stop string that starts in the text of the first tokens and ends after them.
    before_text, cut = cut_at(whole, 10)
    before = len(before_text)
    stop = whole_text[before - 2 : before + 3]
    assert len(stop) == 5 and whole_text.find(stop) == before - 2, "pick another cut"
    body = chat_body(model_name, stop=[stop])
    for _ in range(5):  # a loaded server may put the cut's tokens in one chunk: ask again
        first = stream_events(http, "/v1/chat/completions", body)
        cut_text, first_cut = cut_at(first, cut)  # what the client had: the stop's start held back
        if first_cut == cut:
            break
    assert first_cut == cut
    uninterrupted = text_and_ids(first)[0]
    resumed = stream_events(
        http, "/v1/chat/completions", {**body, "continuation": {"token_ids": whole_ids[:cut]}}
    )
    text, _ = text_and_ids(resumed)
    assert resumed[-1]["choices"][0]["finish_reason"] == "stop"
    assert resumed[-1]["choices"][0]["stop_reason"] == stop
    assert uninterrupted == whole_text[: before - 2]
    assert cut_text + text == uninterrupted


def test_a_completions_continuation_keeps_logprob_offsets(
    http: httpx.Client, model_name: str
) -> None:
    body = {
        "model": model_name,
        "prompt": "Prefix caching reuses",
        "max_tokens": 12,
        "ignore_eos": True,
        "temperature": 0,
        "logprobs": 0,
        "return_token_ids": True,
    }
    whole = http.post("/v1/completions", json=body).json()["choices"][0]
    ids = whole["token_ids"]
    events = stream_events(
        http, "/v1/completions", {**body, "continuation": {"token_ids": ids[:5]}}
    )
    choices = [c for e in events for c in e["choices"]]
    assert [t for c in choices for t in c["token_ids"]] == ids[5:]
    assert [o for c in choices for o in c["logprobs"]["text_offset"]] == whole["logprobs"][
        "text_offset"
    ][5:]
    assert whole["text"].endswith("".join(c["text"] for c in choices))


def test_a_completions_continuation_does_not_echo_the_prompt_again(
    http: httpx.Client, model_name: str
) -> None:
    body = {"model": model_name, "prompt": "Prefix caching reuses", "max_tokens": 8, "echo": True}
    events = stream_events(http, "/v1/completions", {**body, "continuation": {"token_ids": [5]}})
    assert not "".join(c["text"] for e in events for c in e["choices"]).startswith("Prefix")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"stream": False}, "resumes a stream"),
        ({"n": 2}, "one completion"),
        ({"continuation": {"token_ids": [TINY_VOCAB]}}, "continuation token ids must be in"),
        ({"continuation": {"token_ids": []}}, "continuation"),
        ({"continuation": {"token_ids": [5] * MAX_TOKENS}}, "leaving none to generate"),
    ],
)
def test_a_continuation_the_engine_cannot_resume_is_a_clear_400(
    http: httpx.Client, model_name: str, extra: dict[str, Any], message: str
) -> None:
    body = {"continuation": {"token_ids": [5, 6]}, "stream": True, **chat_body(model_name), **extra}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]


def test_a_guided_continuation_goes_on_inside_its_grammar(
    http: httpx.Client, model_name: str
) -> None:
    body = chat_body(model_name, structured_outputs={"regex": "[a-e]{40}"}, max_tokens=60)
    del body["ignore_eos"]
    whole = stream_events(http, "/v1/chat/completions", body)
    whole_text, whole_ids = text_and_ids(whole)
    had, cut = cut_at(whole, 5)
    resumed = stream_events(
        http, "/v1/chat/completions", {**body, "continuation": {"token_ids": whole_ids[:cut]}}
    )
    assert had + text_and_ids(resumed)[0] == whole_text
    assert len(whole_text) == 40 and set(whole_text) <= set("abcde")


def test_a_continuation_outside_its_grammar_is_a_400(http: httpx.Client, model_name: str) -> None:
    digits = http.post("/tokenize", json={"prompt": "123"}).json()["tokens"]
    body = chat_body(model_name, structured_outputs={"regex": "[a-e]{40}"}, stream=True)
    response = http.post(
        "/v1/chat/completions", json={**body, "continuation": {"token_ids": digits}}
    )
    assert response.status_code == 400
    assert "structured-outputs constraint" in response.json()["error"]["message"]
