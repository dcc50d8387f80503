"""A deadline for reading each HTTP request, for the engine's server and the router alike.

uvicorn times out an idle keep-alive connection, but nothing else: a client that connects and sends
nothing, or sends its headers or body a byte at a time (slowloris), holds a connection — and a slot
under the connection cap — for ever. With this protocol, a request must arrive whole (headers and
body) within `read_timeout_s` of its first byte, and a new connection must send a first byte within
the same time; otherwise the connection is closed. Responses, however long they stream, are not
limited.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("pagedock.http")


class _ReadDeadlineProtocol(H11Protocol):
    read_timeout_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._cycle_at_arming: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
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
            logger.debug("closing a connection whose request did not arrive in %.0f s", self.read_timeout_s)  # fmt: skip
            self.transport.close()


def read_deadline_protocol(read_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's `http=` protocol class with this read deadline."""
    return type("ReadDeadlineProtocol", (_ReadDeadlineProtocol,), {"read_timeout_s": read_timeout_s})  # fmt: skip
