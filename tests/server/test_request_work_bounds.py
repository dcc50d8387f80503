"""One request's whole work is bounded before any of it is queued: prompts in a batch, prompts x n,
the shape check of a huge `prompt`, --max-waiting counting every prompt of a batch, and a client
that leaves stopping all of its prompts (issue 34, item 3)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.config import EngineConfig
from engine.server.openai.context import ServerOptions
from pagedock.limits import MAX_PROMPTS, MAX_REQUEST_SEQUENCES
from tests.eventually import eventually_sync
from tests.server.conftest import LONG_MAX_MODEL_LEN
from tests.server.inprocess_server import InProcessServer
from tests.server.server_process import free_port
from tests.server.test_cancellation import wait_for_free_blocks

MAX_WAITING = 4
NUM_KV_BLOCKS = 600  # room for 8 sequences of 1,000 tokens


@pytest.fixture(scope="module")
def server(long_tiny_model_dir: Path) -> Iterator[InProcessServer]:
    config = EngineConfig(
        model=str(long_tiny_model_dir),
        max_model_len=LONG_MAX_MODEL_LEN,
        num_kv_blocks=NUM_KV_BLOCKS,
        num_threads=1,
    )
    options = ServerOptions(port=free_port(), max_waiting=MAX_WAITING)
    server = InProcessServer(config, options).start()
    yield server
    server.stop()


def post(server: InProcessServer, body: object, timeout: float = 30) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/completions",
        content=json.dumps(body),
        headers={"Content-Type": "application/json"},
        timeout=timeout,
    )


def error_message(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    return message


def test_a_batch_over_max_prompts_is_refused(server: InProcessServer) -> None:
    message = error_message(post(server, {"prompt": [[1]] * 20_000, "max_tokens": 1}), 400)
    assert f"at most {MAX_PROMPTS} prompts" in message
    assert server.ctx.engine.num_in_flight == 0


def test_prompts_times_n_over_the_bound_is_refused(server: InProcessServer) -> None:
    body = {"prompt": [[1]] * 20, "n": 128, "max_tokens": 1}
    message = error_message(post(server, body), 400)
    assert f"at most {MAX_REQUEST_SEQUENCES}" in message and "20 prompts x n=128" in message


def test_a_huge_prompt_of_the_wrong_shape_gets_one_error_not_millions(
    server: InProcessServer,
) -> None:
    # A plain union of the four prompt shapes reported 3.2 million errors here, in 60 s.
    start = time.monotonic()
    message = error_message(post(server, {"prompt": [1] * 1_000_000 + ["x"]}), 400)
    assert time.monotonic() - start < 15
    assert "1000000" in message and len(message) < 1000


def test_max_waiting_counts_every_prompt_of_a_batch(server: InProcessServer) -> None:
    body = {"prompt": [[1, 2, 3]] * (MAX_WAITING + 1), "max_tokens": 1}
    message = error_message(post(server, body), 429)
    assert f"this request adds {MAX_WAITING + 1}" in message
    assert server.ctx.engine.num_in_flight == 0
    ok = post(server, {"prompt": [[1, 2, 3]] * MAX_WAITING, "max_tokens": 1})
    assert ok.status_code == 200 and len(ok.json()["choices"]) == MAX_WAITING


def test_a_client_that_leaves_stops_every_prompt_of_its_batch(server: InProcessServer) -> None:
    body = {"prompt": [[1, 2, 3]] * MAX_WAITING, "n": 2, "max_tokens": 1000, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        post(server, body, timeout=0.3)
    # 8 sequences of 1,000 tokens were asked for (seconds); the client's timeout ends them all.
    assert wait_for_free_blocks(server.url, NUM_KV_BLOCKS, timeout_s=10) == NUM_KV_BLOCKS
    # The blocks are freed on the engine thread; the aborted streams end when the loop reads the
    # abort's outputs, a moment later (CI once saw 4 still open right after the blocks).
    eventually_sync(lambda: server.ctx.engine.num_in_flight == 0, 10, "every stream ended")
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'vllm:request_success_total{finished_reason="abort"' in metrics
