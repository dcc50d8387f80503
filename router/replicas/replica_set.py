"""ReplicaSet: the replicas discovery found, each with its KV event subscriber and health checker.

Discovery hands over the full set of URLs whenever it changes; new replicas start their tasks,
departed ones stop them and leave the index. Candidates for routing are the healthy ones.

Model lists are read with each health check; `refresh_models` reads them at once when a request
names a model none lists (an adapter loaded since the last check), one read at a time for all
such requests and at most one every MODELS_REFRESH_MIN_S.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

import httpx

from router.config import RouterConfig
from router.kv.event_subscriber import EventSubscriber
from router.kv.kv_index import KVIndex
from router.kv.subscriber_base import KVEventSubscriber, cancel_and_wait
from router.kv.vllm_event_subscriber import VllmEventSubscriber
from router.metrics import RouterMetrics
from router.replicas.health import HealthChecker
from router.replicas.replica import Replica
from router.replicas.warmer import Warmer

logger = logging.getLogger("pagedock.router")

MODELS_REFRESH_MIN_S = 0.25
"""Least time between two on-demand reads of the model lists (requests naming unknown models
can't make the router flood its replicas)."""


class ReplicaSet:
    def __init__(
        self,
        config: RouterConfig,
        index: KVIndex,
        client: httpx.AsyncClient,
        metrics: RouterMetrics,
    ) -> None:
        self.config = config
        self.index = index
        self.client = client
        self.metrics = metrics
        self.replicas: dict[str, Replica] = {}
        self._subscribers: dict[str, KVEventSubscriber] = {}
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._health: dict[str, HealthChecker] = {}
        self._models_refresh: asyncio.Task[None] | None = None
        self._models_refreshed_at = -MODELS_REFRESH_MIN_S
        self.on_ready: Callable[[], None] = lambda: None
        """Called when a replica joins or turns healthy again (releases held requests)."""
        self.warmer: Warmer | None = None
        """Sends a replica that joins while others serve the hot prefixes first."""

    def update(self, urls: Iterable[str]) -> None:
        """Make the set exactly `urls` (discovery's latest view)."""
        wanted = set(urls)
        for url in sorted(wanted - set(self.replicas)):
            self._add(url)
        for url in sorted(set(self.replicas) - wanted):
            self._remove(url)

    def healthy(self) -> list[Replica]:
        """The routing candidates: healthy, and not being warmed."""
        return [r for r in self.replicas.values() if r.healthy and not r.warming]

    def mark_unhealthy(self, replica: Replica, why: str) -> None:
        """Out of the candidate set at once, its model list dropped until the check that finds it
        healthy again; its cache view as its KV stream decides (replica_failed)."""
        if replica.healthy:
            logger.warning("replica %s is unhealthy: %s", replica.url, why)
            replica.unhealthy_since = time.monotonic()
        replica.healthy = False
        replica.served_models = None
        subscriber = self._subscribers.get(replica.url)
        if subscriber is not None:
            subscriber.replica_failed()
        else:
            self.index.drop(replica.url)

    async def refresh_models(self) -> None:
        """Re-read the healthy replicas' model lists now (joining a read in flight; none when
        one finished within MODELS_REFRESH_MIN_S)."""
        if self._models_refresh is None:
            if time.monotonic() - self._models_refreshed_at < MODELS_REFRESH_MIN_S:
                return
            self._models_refresh = asyncio.create_task(self._refresh_models())
        await asyncio.shield(self._models_refresh)

    async def _refresh_models(self) -> None:
        try:
            healthy = [self._health[r.url] for r in self.healthy() if r.url in self._health]
            await asyncio.gather(*(h.refresh_models() for h in healthy))
        finally:
            self._models_refreshed_at = time.monotonic()
            self._models_refresh = None

    async def close(self) -> None:
        for url in list(self.replicas):
            self._remove(url)
        await asyncio.gather(*(cancel_and_wait(t) for ts in self._tasks.values() for t in ts))
        self._tasks.clear()

    def _add(self, url: str) -> None:
        logger.info("replica %s joined", url)
        # NOTE: a new replica is a candidate at once (no affinity until its snapshot arrives);
        # the first failed check or request takes it out.
        replica = self.replicas[url] = Replica(url)
        subscriber: KVEventSubscriber
        if self.config.is_vllm(url):
            subscriber = VllmEventSubscriber(replica, self.index, self.config, self.metrics)
        else:
            subscriber = EventSubscriber(
                replica, self.index, self.client, self.config, self.metrics
            )
        health = HealthChecker(
            replica, self.client, self.config, self.mark_unhealthy, self.on_ready
        )
        self._subscribers[url] = subscriber
        self._health[url] = health
        self._tasks[url] = [
            asyncio.create_task(subscriber.run(), name=f"kv-events {url}"),
            asyncio.create_task(health.run(), name=f"health {url}"),
        ]
        if self.warmer is not None and self.warmer.wants(others_serving=bool(self.healthy())):
            replica.warming = True
            self._tasks[url].append(asyncio.create_task(self._warm(replica), name=f"warm {url}"))
        self.on_ready()

    async def _warm(self, replica: Replica) -> None:
        assert self.warmer is not None
        try:
            await self.warmer.warm(replica)
        finally:
            replica.warming = False
            self.on_ready()

    def _remove(self, url: str) -> None:
        logger.info("replica %s left", url)
        del self.replicas[url]
        self._subscribers.pop(url, None)
        self._health.pop(url, None)
        for task in self._tasks.pop(url, []):
            task.cancel()
        self.index.drop(url)
        self.metrics.forget_replica(url)
