"""HoldQueue: requests that arrive while no replica is ready wait here, in arrival order.

With zero engines (scaled to zero, all restarting) a request is held instead of refused; the
router's demand endpoint shows the queue, the operator scales up, and the first replica to turn
healthy releases the waiters in the order they came (dispatch order; completion order may
differ). Beyond `hold_queue_size` waiters or `hold_queue_bytes` of their bodies, or after
`hold_timeout_s`, the client gets a 503 with Retry-After at once: never a hang.

A held request is its raw body, nothing parsed: the caller parses it once it is released (a
parsed request costs up to ten times its body, router/http/body_budget.py).

NOTE: releasing sets the waiters' futures in FIFO order, and asyncio resumes their tasks in the
order the futures were set; each resumed request reaches Dispatcher.commit without awaiting, so
the requests are dispatched in arrival order. Except a body over 16 KiB: parsed once released, in
the prompt pool (router/http/request_parser.py), it is dispatched when its parse ends, so after
later smaller ones; in arrival order among the large ones but for the pool's two threads' overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable


class HoldRefused(Exception):
    """The request cannot be held: the queue is full, holding is off, or it waited too long."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class HoldQueue:
    def __init__(
        self, max_size: int, timeout_s: float, is_ready: Callable[[], bool], max_bytes: int
    ) -> None:
        self.max_size = max_size
        self.timeout_s = timeout_s
        self.is_ready = is_ready
        self.max_bytes = max_bytes
        self.held_bytes = 0
        """The bodies of the requests waiting, in bytes."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.oldest_since: float | None = None
        """time.monotonic() when the oldest waiter arrived; None while nobody waits."""

    def __len__(self) -> int:
        return len(self._waiters)

    async def wait_for_replica(self, body_bytes: int = 0) -> None:
        """Return at once while a replica is ready and nobody waits; otherwise wait in line, with
        a body of `body_bytes`."""
        if self.is_ready():
            self.release()
            if not self._waiters:
                return
        if len(self._waiters) >= self.max_size:
            code = "hold_queue_full" if self.max_size else "no_healthy_replica"
            raise HoldRefused(self._full_message(), code)
        if self.held_bytes + body_bytes > self.max_bytes:
            raise HoldRefused(self._bytes_message(body_bytes), "hold_queue_full")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.held_bytes += body_bytes
        if self.oldest_since is None:
            self.oldest_since = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout_s):
                await waiter
        except TimeoutError:
            message = f"no engine replica became ready within {self.timeout_s:g} s"
            raise HoldRefused(message, "no_ready_replica") from None
        finally:
            self.held_bytes -= body_bytes
            self._forget(waiter)

    def release(self) -> None:
        """A replica is ready: every waiter goes, oldest first."""
        while self._waiters and self.is_ready():
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        self._mark_oldest()

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        """A waiter that timed out or whose client left leaves the line."""
        with contextlib.suppress(ValueError):  # released already
            self._waiters.remove(waiter)
        self._mark_oldest()

    def _mark_oldest(self) -> None:
        if not self._waiters:
            self.oldest_since = None

    def _full_message(self) -> str:
        if self.max_size == 0:
            return "no healthy replica"
        return f"no engine replica is ready and {self.max_size} requests already wait for one"

    def _bytes_message(self, body_bytes: int) -> str:
        return (
            f"no engine replica is ready, and this request's {body_bytes}-byte body would take "
            f"the bodies waiting for one past --hold-queue-bytes ({self.max_bytes} bytes; "
            f"{self.held_bytes} held)"
        )
