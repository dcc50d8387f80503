"""What a client sends that the router itself must refuse: its own 4xx, before any replica is
tried, never a 500 and never a replica marked unhealthy."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from pagedock.limits import MAX_BODY_BYTES
from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.test_proxy import serve_router

pytestmark = pytest.mark.timeout(60)
BODY = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()


@pytest.fixture()
def replica_and_router() -> Iterator[tuple[FakeReplica, str]]:
    with ExitStack() as stack:
        fake = FakeReplica("ok")
        yield fake, serve_router(stack, [stack.enter_context(ServerThread(fake.app)).url])


def raw_post(router: str, headers: bytes, body: bytes = BODY) -> tuple[int, bytes]:
    """A request written byte by byte, since HTTP clients refuse to send bad header values."""
    host, port = router.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: router\r\nConnection: close\r\n"
        length = b"Content-Length: %d\r\n" % len(body)
        sock.sendall(
            head + b"Content-Type: application/json\r\n" + headers + length + b"\r\n" + body
        )
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("value", [b"abc\x7fdef", b"a\x01b", b"\x1b[31m"])
def test_a_control_character_in_x_request_id_is_a_400_naming_the_header(
    replica_and_router: tuple[FakeReplica, str], value: bytes
) -> None:
    fake, router = replica_and_router
    status, body = raw_post(router, b"X-Request-Id: " + value + b"\r\n")
    assert status == 400
    error = json.loads(body)["error"]
    assert (error["param"], error["type"]) == ("x-request-id", "invalid_request_error")
    assert "control character" in error["message"]
    assert fake.calls == 0
    assert httpx.get(router + "/health").status_code == 200


def test_a_tab_in_a_header_value_is_legal_and_forwarded(
    replica_and_router: tuple[FakeReplica, str],
) -> None:
    fake, router = replica_and_router
    status, _ = raw_post(router, b"X-Request-Id: a\tb\r\n")
    assert status == 200 and fake.last_headers["x-request-id"] == "a\tb"


def test_a_chunked_body_over_the_limit_is_a_413(
    replica_and_router: tuple[FakeReplica, str],
) -> None:
    fake, router = replica_and_router
    chunk = b"x" * (1 << 20)

    def endless() -> Iterator[bytes]:  # no Content-Length: the router can only count as it reads
        for _ in range(MAX_BODY_BYTES // len(chunk) + 64):
            yield chunk

    response = httpx.post(router + "/v1/completions", content=endless(), timeout=30)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert fake.calls == 0
    assert httpx.get(router + "/health").status_code == 200
