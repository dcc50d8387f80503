"""ReplicaSet: the replicas discovery found, each with its KV event subscriber and health checker.

Discovery hands over the full set of URLs whenever it changes; new replicas start their tasks,
departed ones stop them and leave the index. Candidates for routing are the healthy ones.
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
        """Out of the candidate set at once, its cache view dropped until a fresh snapshot and its
        model list until the check that finds it healthy again."""
        if replica.healthy:
            logger.warning("replica %s is unhealthy: %s", replica.url, why)
            replica.unhealthy_since = time.monotonic()
        replica.healthy = False
        replica.served_models = None
        subscriber = self._subscribers.get(replica.url)
        if subscriber is not None:
            subscriber.resubscribe()  # which drops its cache view, in slices
        else:
            self.index.drop(replica.url)

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
        for task in self._tasks.pop(url, []):
            task.cancel()
        self.index.drop(url)
        self.metrics.forget_replica(url)
