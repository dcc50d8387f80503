"""The built-in model (SmolLM2-135M-Instruct) behind `pagedock serve`, through the openai client:
a real chat template and tokenizer, real text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from tests.server.server_process import ServerProcess, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_server(
    smollm2_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    # By its built-in name, as `make serve` runs it (smollm2_gguf_path has fetched it already).
    args = ["--model", "smollm2-135m-instruct", "--max-model-len", "1024", "--log-level", "warning"]
    server = start_server(args, tmp_path_factory.mktemp("logs") / "smollm2.log")
    yield server
    server.stop()


def test_smollm2_answers_a_chat_and_streams_the_same_text(smollm2_server: ServerProcess) -> None:
    client = OpenAI(
        base_url=f"{smollm2_server.url}/v1", api_key="unused", max_retries=0, timeout=120
    )
    model = client.models.list().data[0].id
    assert model == "smollm2-135m-instruct"
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    whole = client.chat.completions.create(
        model=model, messages=messages, max_tokens=16, temperature=0
    )  # type: ignore[arg-type]
    text = whole.choices[0].message.content or ""
    assert "Paris" in text
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=16, temperature=0, stream=True
    )  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text
    assert whole.choices[0].finish_reason in ("stop", "length")
