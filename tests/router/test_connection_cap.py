"""The connection cap, live: beyond --max-connections open connections the router answers 503 at
once, in OpenAI's error shape with a Retry-After, and serves again as soon as connections close."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.router.live import Process, free_port, wait_until

pytestmark = pytest.mark.timeout(60)


def test_connections_over_the_cap_get_a_503_until_others_close(tmp_path: Path) -> None:
    dead_replica = f"http://127.0.0.1:{free_port()}"
    args = [
        "route",
        "--port",
        str(free_port()),
        "--replica",
        dead_replica,
        "--max-connections",
        "3",
        "--log-level",
        "warning",
    ]
    # Readiness is /metrics answering at all (the router would be ready at /health too).
    router = Process(args, tmp_path / "router.log", health_path="/metrics").start()
    try:
        router.wait_ready(timeout_s=30)
        idle = [socket.create_connection(("127.0.0.1", router.port)) for _ in range(5)]
        refused = httpx.get(router.url + "/metrics", timeout=5)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "too_many_connections"
        for s in idle:
            s.close()
        wait_until(
            lambda: httpx.get(router.url + "/metrics", timeout=5).status_code == 200, timeout_s=5
        )
    finally:
        router.kill()
