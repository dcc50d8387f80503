"""A streamed response is the engine's deltas as they come; concatenated, they are exactly the
non-streamed response (which the server accumulates from the same deltas)."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from tests.server.server_process import ServerProcess


@pytest.fixture(scope="module")
def client(tiny_server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_a_streamed_completions_batch_concatenates_to_the_whole_response(
    client: OpenAI, model_name: str
) -> None:
    kwargs: dict[str, Any] = {
        "model": model_name,
        "prompt": ["Continuous batching", "Paged attention keeps"],
        "max_tokens": 12,
        "n": 2,
        "temperature": 1.0,
        "seed": 11,
        "logprobs": 1,
    }
    whole = client.completions.create(**kwargs)
    texts: dict[int, str] = {}
    tokens: dict[int, list[str]] = {}
    finish: dict[int, str | None] = {}
    for chunk in client.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            tokens.setdefault(choice.index, []).extend(
                (choice.logprobs.tokens or []) if choice.logprobs else []
            )
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
    assert sorted(texts) == [0, 1, 2, 3]
    assert texts == {c.index: c.text for c in whole.choices}
    assert tokens == {c.index: c.logprobs.tokens for c in whole.choices if c.logprobs}
    assert finish == {c.index: c.finish_reason for c in whole.choices}
    assert whole.usage is not None
    assert whole.usage.completion_tokens == sum(len(t) for t in tokens.values())
