"""The read deadline: a request must arrive whole within the deadline of its first byte (and a new
connection must start one); slow or silent clients are disconnected, long responses are not. The
connection cap: a connection over it is answered 503, except the health probe."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from pagedock.http.limits import limited_protocol
from tests.router.live import free_port

pytestmark = pytest.mark.timeout(60)
DEADLINE_S = 0.5
MAX_CONNECTIONS = 2


def make_app() -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/slow-stream")
    async def slow_stream() -> StreamingResponse:
        async def chunks() -> object:
            for i in range(4):
                await asyncio.sleep(DEADLINE_S / 2)
                yield f"{i}\n"

        return StreamingResponse(chunks())  # type: ignore[arg-type]

    return app


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    yield from serve(limited_protocol(DEADLINE_S, 0))


@pytest.fixture(scope="module")
def capped_port() -> Iterator[int]:
    yield from serve(limited_protocol(30.0, MAX_CONNECTIONS))


def serve(protocol: type) -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        make_app(), host="127.0.0.1", port=port, log_level="warning", http=protocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(10)


def seconds_until_closed(port: int, data: bytes) -> tuple[float, bytes]:
    """Send `data`, then read until the server closes: (seconds it took, what it sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return time.monotonic() - start, received


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"POST /echo HTTP/1.1\r\nHost: x\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
    ],
    ids=["silent", "half-headers", "half-body"],
)
def test_a_request_that_does_not_arrive_in_time_is_disconnected(port: int, data: bytes) -> None:
    seconds, received = seconds_until_closed(port, data)
    assert DEADLINE_S * 0.8 < seconds < DEADLINE_S + 2
    assert received == b""


def read_response(sock: socket.socket) -> bytes:
    """One whole response (headers and its Content-Length of body) from a kept-alive socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":")[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head


def test_a_whole_request_is_answered_and_the_next_one_on_the_connection_too(port: int) -> None:
    request = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(DEADLINE_S * 1.5)  # idle between requests: the keep-alive timeout's business
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_a_response_that_streams_longer_than_the_deadline_is_not_cut(port: int) -> None:
    _, received = seconds_until_closed(
        port, b"GET /slow-stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert received.startswith(b"HTTP/1.1 200")
    assert all(f"{i}\n".encode() in received for i in range(4))


def test_health_is_served_on_a_connection_over_the_cap_and_nothing_else_is(
    capped_port: int,
) -> None:
    idle = [socket.create_connection(("127.0.0.1", capped_port)) for _ in range(MAX_CONNECTIONS)]
    try:
        url = f"http://127.0.0.1:{capped_port}"
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 200 and health.headers["connection"] == "close"
        refused = httpx.get(f"{url}/slow-stream", timeout=10)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "too_many_connections"
    finally:
        for sock in idle:
            sock.close()
