"""A non-streamed answer with many log-probabilities is built off the event loop, a choice at a
time (engine/server/openai/logprobs.py), and reads exactly as the one-call serialisation would;
a small answer stays on the loop.
(How long the loop stalls is measured, not asserted: docs/server.md.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import engine.server.openai.chat as chat_module
import engine.server.openai.completions as completions_module
from engine.server.openai.logprobs import OFF_LOOP_MIN_LOGPROB_ENTRIES, answer_json
from pagedock.protocol import (
    ChatChoice,
    ChatCompletionResponse,
    ChatResponseMessage,
    CompletionChoice,
    CompletionLogprobs,
    CompletionResponse,
    UsageInfo,
    response_exclusions,
)
from tests.server.inprocess_server import InProcessServer


def completion_response(model: str) -> CompletionResponse:
    logprobs = CompletionLogprobs(
        tokens=["a", '"choices":[]'],
        token_logprobs=[-0.5, -1.0],
        top_logprobs=[{"a": -0.5, "b": -2.0}, {'"choices":[]': -1.0}],
        text_offset=[0, 1],
    )
    choices = [
        CompletionChoice(index=i, text="a\n\u00e9", logprobs=logprobs, token_ids=[3, 4])
        for i in range(3)
    ]
    usage = UsageInfo(prompt_tokens=2, completion_tokens=6, total_tokens=8)
    return CompletionResponse(model=model, choices=choices, usage=usage, prompt_token_ids=[1])


@pytest.mark.parametrize("return_token_ids", [False, True])
@pytest.mark.parametrize("model", ["tiny", 'a "choices":[] model'])
def test_a_response_serialised_a_choice_at_a_time_reads_as_one_call(
    return_token_ids: bool, model: str
) -> None:
    exclude = response_exclusions(True, return_token_ids)
    completion = completion_response(model)
    chat = ChatCompletionResponse(
        model=model,
        choices=[ChatChoice(index=0, message=ChatResponseMessage(content="x"), token_ids=[5])],
        usage=UsageInfo(),
        prompt_token_ids=[1, 2],
    )
    for response in (completion, chat, completion.model_copy(update={"choices": []})):
        expected = response.model_dump_json(exclude=exclude)
        assert answer_json(response, exclude).decode() == expected


@pytest.fixture
def build_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The name of the thread each non-streamed answer (either endpoint) was built on."""
    threads: list[str] = []
    for module in (completions_module, chat_module):
        build = module._response_json

        def recorded(*args: Any, _build: Any = build) -> bytes:
            threads.append(threading.current_thread().name)
            return _build(*args)  # type: ignore[no-any-return]

        monkeypatch.setattr(module, "_response_json", recorded)
    yield threads


def logprobs_body(path: str, n: int, max_tokens: int) -> dict[str, Any]:
    base = {"n": n, "max_tokens": max_tokens, "ignore_eos": True, "seed": 7}
    if path == "/v1/completions":
        return {**base, "prompt": "The quick brown fox", "logprobs": 20}
    messages = [{"role": "user", "content": "The quick brown fox"}]
    return {**base, "messages": messages, "logprobs": True, "top_logprobs": 20}


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_large_logprobs_answer_is_built_off_the_event_loop(
    inprocess_server: InProcessServer, build_threads: list[str], path: str
) -> None:
    n, max_tokens = 16, 16
    assert n * max_tokens * 21 >= OFF_LOOP_MIN_LOGPROB_ENTRIES
    response = httpx.post(
        f"{inprocess_server.url}{path}", json=logprobs_body(path, n, max_tokens), timeout=120
    )
    assert response.status_code == 200, response.text
    choices = json.loads(response.content)["choices"]
    assert [c["index"] for c in choices] == list(range(n))
    assert all(c["logprobs"] is not None for c in choices)
    assert build_threads and build_threads[0] != inprocess_server.thread.name


def test_a_small_answer_is_built_on_the_event_loop(
    inprocess_server: InProcessServer, build_threads: list[str]
) -> None:
    body = logprobs_body("/v1/completions", 1, 2)
    response = httpx.post(f"{inprocess_server.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert build_threads == [inprocess_server.thread.name]
