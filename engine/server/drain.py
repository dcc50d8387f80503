"""Graceful shutdown on SIGTERM, as a rolling update needs it.

uvicorn's own handling stops listening at once and, after shutting down, re-raises the signal (so
the process dies of it, not with exit code 0). Here the first SIGTERM or SIGINT instead starts a
drain: new requests get 503 and /health fails (Kubernetes stops routing here), requests in flight
finish for up to `drain_timeout` seconds and are aborted after that (a stream a router can resume
is handed off to it instead: engine/server/openai/handoff.py), and only then is uvicorn told to
exit, normally. A second signal exits at once.

GET /drain reports what sizing a pod's termination grace period needs (`drain_report`): the drain
timeout this server runs with, the seconds it needs past that deadline to hand off or abort and
close (`HANDOFF_SECONDS`), and how long its recent requests ran (request_durations.py). The
operator reads it from every ready engine pod (operator/llm_operator/fleet/drain_reports.py).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from types import FrameType

import uvicorn

from engine.server.openai.context import ServerContext

logger = logging.getLogger("pagedock.server")
_POLL_S = 0.05
# After the drain timeout, how long aborted requests get to send their last bytes.
_ABORT_GRACE_S = 2.0
# Seconds uvicorn then waits for open connections (a handed-off stream's last event) before exit.
GRACEFUL_SHUTDOWN_S = 5
# Past the drain deadline, the longest until the HTTP server has closed.
HANDOFF_SECONDS = _ABORT_GRACE_S + GRACEFUL_SHUTDOWN_S


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        drain: Callable[[], Awaitable[None]],
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._on_ready = on_ready
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None  # held so it is not collected

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    async def startup(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        await super().startup(sockets)  # type: ignore[arg-type]
        if self.started and self._on_ready is not None:
            self._on_ready()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining or self._loop is None:
            logger.warning("second signal %s: exiting without waiting", signal.Signals(sig).name)
            self.should_exit = True
            self.force_exit = True
            return
        self._draining = True
        # NOTE: this runs inside a signal handler: only hand the work to the loop, thread-safely.
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain()
        finally:
            self.should_exit = True


async def drain(ctx: ServerContext) -> None:
    """Stop admitting, let in-flight requests finish (or abort them at the timeout)."""
    ctx.draining = True
    engine = ctx.engine
    timeout_s = ctx.options.drain_timeout
    logger.info(
        "draining: %d requests in flight, waiting up to %.0fs", engine.num_in_flight, timeout_s
    )
    if not await _wait_idle(ctx, timeout_s):
        # NOTE: streams a router can resume are handed off (engine/server/openai/handoff.py):
        # they end without [DONE] and the router goes on elsewhere; the others end aborted.
        logger.warning("drain timeout: handing off or aborting %d requests", engine.num_in_flight)
        ctx.handing_off = True
        engine.abort_all()
        await _wait_idle(ctx, _ABORT_GRACE_S)
    ctx.kv_hub.close_all()
    logger.info("drained; shutting down")


async def _wait_idle(ctx: ServerContext, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while ctx.engine.num_in_flight and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
    return ctx.engine.num_in_flight == 0


def drain_report(ctx: ServerContext) -> dict[str, object]:
    """GET /drain's body: the deadline, the time needed past it, the recent requests' durations."""
    summary = ctx.metrics.request_durations.summary()
    return {
        "drain_timeout_seconds": ctx.options.drain_timeout,
        "handoff_seconds": HANDOFF_SECONDS,
        "draining": ctx.draining,
        "num_requests": summary.num_requests,
        "longest_request_seconds": _rounded(summary.longest_request_seconds),
        "p99_request_seconds": _rounded(summary.p99_request_seconds),
        "oldest_in_flight_seconds": _rounded(summary.oldest_in_flight_seconds),
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
