"""Progress-based liveness: `/health` is 503 while a step hangs past --stall-timeout-s, and ok again
once the loop goes round; an idle engine is never stalled."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.config import EngineConfig
from engine.server.openai.context import ServerOptions
from tests.router.live import free_port
from tests.server.inprocess_server import InProcessServer

pytestmark = pytest.mark.timeout(90)
STALL_TIMEOUT_S = 1.0


@pytest.fixture()
def server(tiny_model_dir: Path) -> Iterator[InProcessServer]:
    config = EngineConfig(
        model=str(tiny_model_dir), max_model_len=64, num_kv_blocks=64, num_threads=1
    )
    options = ServerOptions(port=free_port(), stall_timeout_s=STALL_TIMEOUT_S)
    server = InProcessServer(config, options).start()
    yield server
    server.stop()


def hang_the_next_step(server: InProcessServer) -> threading.Event:
    """The next engine step blocks until the returned event is set."""
    release, step = threading.Event(), server.engine.step_core

    def hung_step(*args: Any, **kwargs: Any) -> Any:
        release.wait(30)
        return step(*args, **kwargs)

    server.engine.step_core = hung_step  # type: ignore[method-assign]
    return release


def health(server: InProcessServer) -> httpx.Response:
    return httpx.get(server.url + "/health", timeout=5)


def test_an_idle_engine_stays_healthy_past_the_stall_timeout(server: InProcessServer) -> None:
    time.sleep(STALL_TIMEOUT_S * 2.5)
    body = health(server).json()
    assert body["status"] == "ok" and body["seconds_since_progress"] < STALL_TIMEOUT_S


def test_a_hung_step_makes_health_503_until_the_loop_goes_round_again(
    server: InProcessServer,
) -> None:
    release = hang_the_next_step(server)
    answers: list[httpx.Response] = []
    body = {"prompt": "hello", "max_tokens": 2}
    client = threading.Thread(
        target=lambda: answers.append(
            httpx.post(server.url + "/v1/completions", json=body, timeout=60)
        )
    )
    client.start()
    deadline = time.monotonic() + STALL_TIMEOUT_S * 5
    while (response := health(server)).status_code == 200:
        assert time.monotonic() < deadline, "/health never noticed the hung step"
        time.sleep(0.1)
    assert response.status_code == 503 and response.json()["status"] == "engine stalled"
    assert response.json()["seconds_since_progress"] >= STALL_TIMEOUT_S
    release.set()
    client.join(30)
    assert answers[0].status_code == 200  # the request itself was only late
    assert health(server).json()["status"] == "ok"
