"""Limits on each HTTP connection, for the engine's server and the router alike: a deadline for
reading each request, and a cap on open connections answered in OpenAI's error shape.

uvicorn times out an idle keep-alive connection, but nothing else: a client that connects and sends
nothing, or sends its headers or body a byte at a time (slowloris), holds a connection — and a slot
under the connection cap — for ever. With this protocol, a request must arrive whole (headers and
body) within `read_timeout_s` of its first byte, and a new connection must send a first byte within
the same time; otherwise the connection is closed. Responses, however long they stream, are not
limited.

uvicorn's own connection cap (`limit_concurrency`) answers a plain-text 503 that OpenAI clients
can't parse; here a connection over the cap is served by an app that answers every request on it
with OpenAI's error object, a Retry-After and `Connection: close` — except the health probe
(UNCAPPED_PATHS), which is served as usual and then closed: a flood of idle connections must not
fail the kubelet's probes (and restart the pod) or make routers drop the replica.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from pagedock.http.errors import error_json

logger = logging.getLogger("pagedock.http")

UNCAPPED_PATHS = frozenset({"/health"})
"""Paths served on a connection over the cap too (cheap, and what probes and routers ask)."""


async def _over_the_cap(scope: Scope, receive: Receive, send: Send) -> None:
    """Every request on a connection over the cap: a 503 in OpenAI's shape, then the close."""
    body = error_json(
        503, "the server has too many open connections; retry shortly", code="too_many_connections"
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _over_the_cap_app(app: ASGIApp) -> ASGIApp:
    """The app of a connection over the cap: UNCAPPED_PATHS by `app`, with `Connection: close`
    (the connection ends after its answer), every other request _over_the_cap."""

    async def over_the_cap_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in UNCAPPED_PATHS:
            await _over_the_cap(scope, receive, send)
            return

        async def send_and_close(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, send_and_close)

    return over_the_cap_app


class _LimitedProtocol(H11Protocol):
    read_timeout_s: float = 30.0
    max_connections: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._cycle_at_arming: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.max_connections and len(self.connections) > self.max_connections:
            logger.debug("a connection over the cap of %d: answered 503", self.max_connections)
            self.app = _over_the_cap_app(self.app)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and not self._reading_a_request():
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def _reading_a_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._cycle_at_arming = self.cycle
        self._deadline = self.loop.call_later(self.read_timeout_s, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self._deadline = None
        no_headers_yet = self.cycle is self._cycle_at_arming
        if no_headers_yet or self.cycle.more_body:
            # debug, not warning: a flood of such clients must not flood the log as well
            logger.debug(
                "closing a connection whose request did not arrive in %.0f s", self.read_timeout_s
            )
            self.transport.close()


def limited_protocol(read_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's `http=` protocol class with this read deadline and connection cap (0 = none)."""
    fields = {"read_timeout_s": read_timeout_s, "max_connections": max_connections}
    return type("LimitedProtocol", (_LimitedProtocol,), fields)
