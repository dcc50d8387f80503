"""KVEventSubscriber: what following one replica's KV events takes, whatever their wire format.

    run()          one attempt after another until cancelled: connect, apply the stream until it
                   ends or fails, drop the replica's view, wait, reconnect
    backoff        from its shortest to its longest delay, doubling per failed attempt; back to the
                   shortest after an attempt that had synced (a fresh failure, retried quickly)
    resubscribe()  ends the current attempt (the replica failed a check); run() goes on
    stop           cancelling run()'s task ends it for good (cancel_and_wait)

A subclass says how to connect and read its stream (_consume), how to drop the replica's view
(_drop_view) and, if it wants, how to treat a failed attempt (_failed) and how long to wait after
one (_retry_delay_s): router/kv/event_subscriber.py (pagedock's NDJSON over HTTP) and
router/kv/vllm_event_subscriber.py (vLLM's ZMQ events).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from router.config import RouterConfig
from router.kv.kv_index import KVIndex
from router.metrics import RouterMetrics

if TYPE_CHECKING:
    from router.replicas.replica import Replica

logger = logging.getLogger("pagedock.router")


class KVEventSubscriber(ABC):
    stream_name = "KV events"
    """How log lines name the stream ("KV events of http://replica: ...")."""

    def __init__(
        self,
        replica: Replica,
        index: KVIndex,
        config: RouterConfig,
        metrics: RouterMetrics,
        backoff_s: tuple[float, float],
    ) -> None:
        self.replica = replica
        self.index = index
        self.config = config
        self.metrics = metrics
        self._backoff_min_s, self._backoff_max_s = backoff_s
        self._attempt: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Subscribe until cancelled; an attempt ends only on resubscribe() or an error."""
        backoff_s = self._backoff_min_s
        while True:
            self._attempt = asyncio.create_task(self._consume())
            try:
                await self._attempt
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # run() itself was cancelled, not just this attempt
            except Exception as e:  # a malformed message must not end the subscription for good
                self._failed(e)
            await self._drop_view()
            if self.replica.kv_synced:  # it had synced: a fresh failure, retry quickly
                backoff_s = self._backoff_min_s
            self.replica.kv_synced = False
            await asyncio.sleep(self._retry_delay_s(backoff_s))
            backoff_s = min(backoff_s * 2, self._backoff_max_s)

    def replica_failed(self) -> None:
        """The replica failed a check or a request. A stream with no liveness of its own (vLLM's
        ZMQ) can't tell a publisher that is gone: start over, dropping the view."""
        self.resubscribe()

    def resubscribe(self) -> None:
        """Drop the current stream (the replica failed a check); run() reconnects after backoff,
        having dropped the replica's view."""
        if self._attempt is not None and not self._attempt.done():
            self._attempt.cancel()

    @abstractmethod
    async def _consume(self) -> None:
        """One attempt: connect, then apply the stream to the index until it ends or fails."""

    @abstractmethod
    async def _drop_view(self) -> None:
        """The attempt is over: forget what it told the index of the replica."""

    def _failed(self, error: Exception) -> None:
        """An attempt failed with `error` (called while it is being handled)."""
        logger.exception("%s of %s: unexpected error", self.stream_name, self.replica.url)

    def _retry_delay_s(self, backoff_s: float) -> float:
        """Seconds to wait before the next attempt, the backoff being at `backoff_s`."""
        return backoff_s


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (a subscriber's run(), any background task) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
