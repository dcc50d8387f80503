"""SIGTERM drains: no new work (503, /health failing), in-flight requests finish (or are aborted
at the drain timeout), then the process exits 0."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from router.http.upstream_errors import Verdict, classify_upstream
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server


def start_draining_server(model_dir: Path, log: Path, drain_timeout: float) -> ServerProcess:
    return start_server(tiny_server_args(model_dir, "--drain-timeout", str(drain_timeout)), log)


@pytest.fixture
def make_server() -> Iterator[list[ServerProcess]]:
    """Servers the test started; stopped (killed if need be) whatever the test did."""
    servers: list[ServerProcess] = []
    yield servers
    for server in servers:
        server.stop()


def last_finish_reason(lines: Iterator[str]) -> str | None:
    """Read an SSE stream to [DONE]; the last finish_reason it carried."""
    reason = None
    for line in lines:
        if line == "data: [DONE]":
            return reason
        if line.startswith("data: "):
            for choice in json.loads(line[6:]).get("choices", []):
                reason = choice.get("finish_reason") or reason
    raise AssertionError("the stream ended without [DONE]")


def wait_until(predicate: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def health_status(server: ServerProcess) -> int:
    try:
        return httpx.get(f"{server.url}/health", timeout=1).status_code
    except httpx.HTTPError:
        return -1


@contextmanager
def streaming_then_sigterm(
    server: ServerProcess, max_tokens: int
) -> Iterator[tuple[httpx.Client, Iterator[str]]]:
    """A long streaming request under way (its first chunk read), then SIGTERM to the server."""
    body = {"prompt": "abc", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=60) as client,
        client.stream("POST", "/v1/completions", json=body) as stream,
    ):
        lines = stream.iter_lines()
        next(lines)
        server.terminate()
        yield client, lines


def test_sigterm_lets_in_flight_requests_finish_then_exits_zero(
    make_server: list[ServerProcess], long_tiny_model_dir: Path, tmp_path: Path
) -> None:
    server = start_draining_server(long_tiny_model_dir, tmp_path / "drain.log", drain_timeout=60)
    make_server.append(server)
    with streaming_then_sigterm(server, max_tokens=600) as (client, lines):
        assert wait_until(lambda: health_status(server) == 503)
        refused = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 1})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
        assert last_finish_reason(lines) == "length"  # it ran to its end
    assert server.wait_exit(timeout_s=30) == 0


def test_drain_timeout_aborts_what_is_left_and_still_exits_zero(
    make_server: list[ServerProcess], long_tiny_model_dir: Path, tmp_path: Path
) -> None:
    server = start_draining_server(long_tiny_model_dir, tmp_path / "drain.log", drain_timeout=0.5)
    make_server.append(server)
    with streaming_then_sigterm(server, max_tokens=4000) as (_, lines):
        assert last_finish_reason(lines) == "abort"
    assert server.wait_exit(timeout_s=30) == 0


def test_a_non_streamed_request_cut_by_the_drain_is_a_503_a_router_retries(
    make_server: list[ServerProcess], long_tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Never a 200 with `finish_reason: abort`: a client would take the cut text as whole."""
    server = start_draining_server(long_tiny_model_dir, tmp_path / "drain.log", drain_timeout=0.5)
    make_server.append(server)
    body = {"prompt": "abc", "max_tokens": 4000, "ignore_eos": True}
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.url, timeout=60) as client:
        answer = pool.submit(client.post, "/v1/completions", json=body)
        assert wait_until(lambda: in_flight_seconds(server) is not None, timeout_s=30)
        server.terminate()
        response = answer.result(timeout=60)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "draining"
    assert response.headers["retry-after"] == "1"
    assert classify_upstream(503, response.content) is Verdict.REPLICA_FAILED
    assert server.wait_exit(timeout_s=30) == 0


def in_flight_seconds(server: ServerProcess) -> float | None:
    """How long the oldest request in flight has run (GET /drain), None when there is none."""
    seconds = httpx.get(f"{server.url}/drain", timeout=5).json()["oldest_in_flight_seconds"]
    return None if seconds is None else float(seconds)
