"""The fleet's internal key (--internal-api-key) and the KV event streams' own cap, live.

With the key set, a body with `continuation` and GET /v1/kv/events are the routers' only: without
the key a continuation is a 403 and the event stream a 401, in OpenAI's error shape, even for a
client holding the API key. Event streams are capped apart from requests
(--max-kv-event-subscribers): subscribers that never read hold no more than their few slots, and
/health and requests are still served.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pagedock.http.internal_key import INTERNAL_KEY_HEADER
from pagedock.protocol import CONTINUATION_HEADER
from tests.router.live import wait_until
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server

pytestmark = pytest.mark.timeout(120)
INTERNAL_KEY = "fleet-internal-key"
API_KEY = "client-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
INTERNAL = {**AUTH, INTERNAL_KEY_HEADER: INTERNAL_KEY}
MAX_SUBSCRIBERS = 2


@pytest.fixture(scope="module")
def server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    args = tiny_server_args(
        tiny_model_dir, "--max-kv-event-subscribers", str(MAX_SUBSCRIBERS), "--max-model-len", "256"
    )
    env = {"PAGEDOCK_API_KEY": API_KEY, "PAGEDOCK_INTERNAL_API_KEY": INTERNAL_KEY}
    log = tmp_path_factory.mktemp("logs") / "internal-key-server.log"
    server = start_server(args, log, env=env)
    yield server
    server.stop()


def continuation_body(**extra: Any) -> dict[str, Any]:
    return {
        "prompt": "Paged attention keeps",
        "max_tokens": 8,
        "stream": True,
        "temperature": 1.0,
        "seed": 7,
        "continuation": {"token_ids": [5, 6, 7]},
        **extra,
    }


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    return error


@pytest.mark.parametrize("headers", [AUTH, {**AUTH, INTERNAL_KEY_HEADER: "a guess"}])
def test_a_continuation_without_the_internal_key_is_refused(
    server: ServerProcess, headers: dict[str, str]
) -> None:
    response = httpx.post(
        f"{server.url}/v1/completions", json=continuation_body(), headers=headers, timeout=30
    )
    error = assert_openai_error(response, 403, "continuation_not_allowed")
    assert error["param"] == "continuation" and INTERNAL_KEY_HEADER in error["message"]


def test_a_continuation_with_the_internal_key_is_resumed(server: ServerProcess) -> None:
    with httpx.stream(
        "POST",
        f"{server.url}/v1/completions",
        json=continuation_body(),
        headers=INTERNAL,
        timeout=30,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers[CONTINUATION_HEADER] == "3"
        assert "data: [DONE]" in list(response.iter_lines())


def test_a_continuation_longer_than_the_cap_is_a_400_before_any_work(
    server: ServerProcess,
) -> None:
    body = continuation_body(continuation={"token_ids": [5] * 131_073})
    response = httpx.post(f"{server.url}/v1/completions", json=body, headers=INTERNAL, timeout=30)
    assert response.status_code == 400, response.text
    assert "131072" in response.json()["error"]["message"]  # the parse's cap, not the context's


@pytest.mark.parametrize("headers", [{}, AUTH, {**AUTH, INTERNAL_KEY_HEADER: "a guess"}])
def test_the_kv_event_stream_needs_the_internal_key(
    server: ServerProcess, headers: dict[str, str]
) -> None:
    response = httpx.get(f"{server.url}/v1/kv/events", headers=headers, timeout=10)
    assert_openai_error(response, 401, "invalid_internal_key")


def subscribe_and_never_read(server: ServerProcess) -> tuple[socket.socket, bytes]:
    """A KV event subscriber that reads its answer's first bytes, then nothing more."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(
        f"GET /v1/kv/events HTTP/1.1\r\nHost: x\r\n{INTERNAL_KEY_HEADER}: {INTERNAL_KEY}\r\n"
        "\r\n".encode()
    )
    return sock, sock.recv(64)


def test_idle_subscribers_beyond_the_cap_are_refused_and_the_server_still_serves(
    server: ServerProcess,
) -> None:
    subscribers = [subscribe_and_never_read(server) for _ in range(MAX_SUBSCRIBERS + 8)]
    try:
        statuses = [first.split(b"\r\n", 1)[0] for _, first in subscribers]
        assert statuses.count(b"HTTP/1.1 200 OK") == MAX_SUBSCRIBERS, statuses
        assert statuses.count(b"HTTP/1.1 503 Service Unavailable") == 8, statuses
        refused = httpx.get(f"{server.url}/v1/kv/events", headers=INTERNAL, timeout=10)
        assert_openai_error(refused, 503, "too_many_kv_event_subscribers")
        assert refused.headers["retry-after"] == "1"
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        good = {"prompt": "hi", "max_tokens": 2}
        answer = httpx.post(f"{server.url}/v1/completions", json=good, headers=AUTH, timeout=30)
        assert answer.status_code == 200, answer.text
    finally:
        for sock, _ in subscribers:
            sock.close()
    # Their slots come back once they are gone.
    wait_until(lambda: can_subscribe(server), 10)


def can_subscribe(server: ServerProcess) -> bool:
    sock, first = subscribe_and_never_read(server)
    sock.close()
    return first.startswith(b"HTTP/1.1 200")
