"""`pagedock serve --speculative-config`: a greedy completion reads as on a server without it,
and the drafts it verified show on /metrics with vLLM's names."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import start_tiny_server
from tests.server.server_process import ServerProcess
from tests.server.test_metrics import scrape
from tests.tiny_model import TINY_VOCAB

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}'


@pytest.fixture(scope="module")
def spec_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = start_tiny_server(
        tiny_model_dir, tmp_path_factory, "spec-server", "--speculative-config", NGRAM
    )
    yield server
    server.stop()


def complete(server: ServerProcess, prompt: list[int]) -> str:
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    text: str = response.json()["choices"][0]["text"]
    return text


def test_greedy_completions_match_and_drafts_show_on_metrics(
    spec_server: ServerProcess, tiny_server: ServerProcess
) -> None:
    rng = random.Random(0)
    phrase = [rng.randrange(3, TINY_VOCAB) for _ in range(6)]
    before = scrape(spec_server)
    assert complete(spec_server, phrase * 4) == complete(tiny_server, phrase * 4)
    after = scrape(spec_server)
    drafts = "vllm:spec_decode_num_drafts_total"
    assert after[drafts] - before.get(drafts, 0.0) > 0
    assert after["vllm:spec_decode_num_draft_tokens_total"] >= after[drafts]
    assert "vllm:spec_decode_num_drafts_total" not in scrape(tiny_server)
