"""POST /v1/embeddings on a live server (the tiny model, float32), through the official `openai`
client and plain HTTP: vectors equal to transformers' pooled last hidden states (1e-5 absolute +
1e-4 relative), the same vector alone and in a batch (1e-5), base64 that decodes to exactly the
floats, usage, the request log line and metrics, errors in OpenAI's shape, and no KV block held
once the requests are done."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from openai import OpenAI

from engine.config import EngineConfig
from tests.eventually import eventually_sync
from tests.server.inprocess_server import InProcessServer

pytestmark = pytest.mark.timeout(300)
HF_TOLERANCE: dict[str, Any] = dict(atol=1e-5, rtol=1e-4)
SAME_TOLERANCE: dict[str, Any] = dict(atol=1e-5, rtol=0.0)
MAX_MODEL_LEN = 128
NUM_KV_BLOCKS = 64
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paged attention keeps KV memory."]


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[InProcessServer]:
    config = EngineConfig(
        model=str(tiny_model_dir),
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        num_kv_blocks=NUM_KV_BLOCKS,
        num_threads=1,
    )
    server = InProcessServer(config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server: InProcessServer) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir: Path) -> Any:
    from transformers import LlamaModel

    return LlamaModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def hf_embedding(hf_model: Any, ids: list[int], kind: str = "LAST", normalize: bool = True) -> Any:
    with torch.inference_mode():
        hidden = hf_model(torch.tensor([ids])).last_hidden_state[0]
    pooled = {"LAST": hidden[-1], "MEAN": hidden.mean(dim=0), "CLS": hidden[0]}[kind]
    return F.normalize(pooled, dim=0) if normalize else pooled


def post(server: InProcessServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", json=body, timeout=60)


def token_ids(server: InProcessServer, text: str) -> list[int]:
    tokenizer = server.engine.tokenizer
    assert tokenizer is not None
    return tokenizer.encode(text)


def test_the_openai_client_gets_transformers_vectors(
    server: InProcessServer, client: OpenAI, hf_model: Any, model_name: str
) -> None:
    # The client asks for base64 unless told otherwise, and decodes it.
    result = client.embeddings.create(model=model_name, input=TEXTS)
    assert [d.index for d in result.data] == [0, 1] and result.model == model_name
    for text, data in zip(TEXTS, result.data, strict=True):
        want = hf_embedding(hf_model, token_ids(server, text))
        torch.testing.assert_close(torch.tensor(data.embedding), want, **HF_TOLERANCE)
    num_tokens = sum(len(token_ids(server, t)) for t in TEXTS)
    assert result.usage.prompt_tokens == result.usage.total_tokens == num_tokens


@pytest.mark.parametrize("kind", ["MEAN", "CLS", "LAST"])
def test_the_pooling_named_in_the_request(
    server: InProcessServer, hf_model: Any, model_name: str, kind: str
) -> None:
    ids = token_ids(server, TEXTS[0])
    body = {"model": model_name, "input": ids, "pooling_type": kind.lower(), "normalize": False}
    answer = post(server, body)
    assert answer.status_code == 200, answer.text
    got = torch.tensor(answer.json()["data"][0]["embedding"])
    torch.testing.assert_close(got, hf_embedding(hf_model, ids, kind, False), **HF_TOLERANCE)


def test_base64_decodes_to_the_same_floats(server: InProcessServer) -> None:
    body: dict[str, Any] = {"input": TEXTS, "pooling_type": "MEAN"}
    floats = post(server, body).json()["data"]
    encoded = post(server, {**body, "encoding_format": "base64"}).json()["data"]
    for f, b in zip(floats, encoded, strict=True):
        assert isinstance(b["embedding"], str)
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4").tolist()
        assert decoded == f["embedding"]  # float32 both ways: exactly


def test_the_same_vector_alone_and_in_a_batch(server: InProcessServer) -> None:
    texts = [TEXTS[0], TEXTS[1] * 5, "Prefix caching reuses."]
    inputs = [token_ids(server, t) for t in texts]
    batch = post(server, {"input": inputs, "pooling_type": "MEAN"}).json()["data"]
    for i, entry in enumerate(inputs):
        [alone] = post(server, {"input": entry, "pooling_type": "MEAN"}).json()["data"]
        want = torch.tensor(alone["embedding"])
        torch.testing.assert_close(torch.tensor(batch[i]["embedding"]), want, **SAME_TOLERANCE)


def test_truncate_prompt_tokens_keeps_the_last_tokens(server: InProcessServer) -> None:
    ids = token_ids(server, TEXTS[0]) * 20  # longer than the context
    cut = post(server, {"input": ids, "truncate_prompt_tokens": 16}).json()
    tail = post(server, {"input": ids[-16:]}).json()
    assert cut["usage"]["prompt_tokens"] == 16
    torch.testing.assert_close(
        torch.tensor(cut["data"][0]["embedding"]), torch.tensor(tail["data"][0]["embedding"])
    )


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"input": ""}, 400, "input", None),
        ({"input": []}, 400, "input", None),
        ({"input": ["a", ""]}, 400, "input", None),
        ({"input": [1] * (MAX_MODEL_LEN + 1)}, 400, "input", "context_length_exceeded"),
        ({"input": [100_000]}, 400, "input", None),
        ({"input": "a", "encoding_format": "hex"}, 400, "encoding_format", None),
        ({"input": "a", "dimensions": 8}, 400, "dimensions", None),
        ({"input": "a", "pooling_type": "max"}, 400, "pooling_type", None),
        ({"input": "a", "truncate_prompt_tokens": 10_000}, 400, "truncate_prompt_tokens", None),
        ({"input": "a", "model": "nope"}, 404, "model", "model_not_found"),
    ],
)
def test_bad_requests_get_openai_errors(
    server: InProcessServer, body: dict[str, Any], status: int, param: str, code: str | None
) -> None:
    answer = post(server, body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["code"] == code, error
    assert error["message"]


def test_a_finished_request_is_logged_and_counted(
    server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    def prompt_tokens_total() -> float:
        text = httpx.get(f"{server.url}/metrics").text
        line = next(ln for ln in text.splitlines() if ln.startswith("vllm:prompt_tokens_total"))
        return float(line.split()[-1])

    before = prompt_tokens_total()
    with caplog.at_level(logging.INFO, logger="pagedock.requests"):
        answer = post(server, {"input": TEXTS[1]}).json()
        lines = eventually_sync(
            lambda: [
                json.loads(r.getMessage())
                for r in caplog.records
                if r.name == "pagedock.requests" and "request_finished" in r.getMessage()
            ],
            what="a request_finished line",
        )
    [line] = lines
    assert line["prompt_tokens"] == answer["usage"]["prompt_tokens"]
    assert line["generated_tokens"] == 0 and line["finish_reason"] == "stop"
    eventually_sync(
        lambda: prompt_tokens_total() == before + answer["usage"]["prompt_tokens"],
        what=lambda: f"prompt tokens counted: {prompt_tokens_total() - before}",
    )


def test_no_kv_block_is_held_after_the_requests(server: InProcessServer) -> None:
    post(server, {"input": [TEXTS[0]] * 8, "pooling_type": "MEAN"})
    eventually_sync(
        lambda: server.ctx.engine.stats.num_free_kv_blocks == NUM_KV_BLOCKS,
        what=lambda: f"free blocks: {server.ctx.engine.stats}",
    )
