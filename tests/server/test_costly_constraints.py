"""Constraints that cost the engine thread (issue 34, items 1 and 2), against a live `pagedock
serve` with the built-in SmolLM2 (a 49k vocabulary, where the costs were measured):

- an 18-character regex whose every mask costs more than the last fails its requests with a 400
  after one over-budget mask (not n), is refused at once from then on, and a good request beside
  it is served with /health answering all along;
- a schema with too many properties (compile time cubic in them) is refused before compiling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from pagedock.limits import MAX_SCHEMA_PROPERTIES
from tests.server.server_process import ServerProcess, start_server

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
POISON = {"regex": "(.|..|...){1,5000}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    args = ["--model", MODEL, "--max-model-len", "512", "--num-kv-blocks", "256"]
    log = tmp_path_factory.mktemp("logs") / "costly.log"
    server = start_server([*args, "--log-level", "warning"], log)
    yield server
    server.stop()


def completion(server: ServerProcess, **body: object) -> httpx.Response:
    body = {"model": MODEL, "prompt": "Write a short story about a cat.", **body}
    return httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)


def good_latency(server: ServerProcess) -> float:
    start = time.perf_counter()
    response = completion(server, max_tokens=16, temperature=0)
    assert response.status_code == 200, response.text
    return time.perf_counter() - start


def test_a_costly_regex_fails_alone_and_is_refused_from_then_on(server: ServerProcess) -> None:
    quiet = min(good_latency(server) for _ in range(3))
    health: list[int] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            health.append(httpx.get(f"{server.url}/health", timeout=30).status_code)
            stop.wait(0.1)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        start = time.perf_counter()
        poisoned = completion(server, n=8, max_tokens=64, structured_outputs=POISON)
        poison_s = time.perf_counter() - start
        beside = good_latency(server)
    finally:
        stop.set()
        prober.join()
    print(f"\ngood quiet {quiet:.2f} s, beside {beside:.2f} s; poison refused in {poison_s:.2f} s")
    assert poisoned.status_code == 400, poisoned.text
    error = poisoned.json()["error"]
    assert error["param"] == "structured_outputs" and "too costly" in error["message"]
    assert health and set(health) == {200}
    # One over-budget mask (~0.3 s here), not eight, nor the minutes the steps grew to.
    assert poison_s < quiet + 5
    assert beside < max(2 * quiet, quiet + 1)
    # Refused at once now: nothing is compiled or masked again.
    again = completion(server, max_tokens=8, structured_outputs=POISON, stream=True)
    assert again.status_code == 400 and "too costly" in again.json()["error"]["message"]


def test_a_schema_with_too_many_properties_is_refused_before_compiling(
    server: ServerProcess,
) -> None:
    properties = {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_PROPERTIES + 1)}
    schema = {"type": "object", "properties": properties}
    start = time.perf_counter()
    response = completion(server, max_tokens=8, structured_outputs={"json": schema})
    assert time.perf_counter() - start < 5
    assert response.status_code == 400, response.text
    assert f"at most {MAX_SCHEMA_PROPERTIES}" in response.json()["error"]["message"]
