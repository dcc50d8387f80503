"""HealthChecker: every health interval, GET /health, /metrics and /v1/models of one replica.

A replica that answers 200 is a candidate and its reported load is updated; one that fails (error,
timeout, non-200 such as a draining engine's 503) leaves the candidate set at once, and its cache
entries with it, until a later check passes. Requests that fail on a replica mark it the same way
between checks (router/http/proxy.py).

The model list (base model and LoRA adapters, router/replicas/served_models.py) is read in the
same round, since adapters are loaded and unloaded at run time; a list that can't be read leaves
the last one in place (health is /health's answer alone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx

from router.config import RouterConfig
from router.replicas.replica import Replica
from router.replicas.replica_metrics import parse_replica_load
from router.replicas.served_models import ServedModels, parse_model_list

logger = logging.getLogger("pagedock.router")


class HealthChecker:
    def __init__(
        self,
        replica: Replica,
        client: httpx.AsyncClient,
        config: RouterConfig,
        on_unhealthy: Callable[[Replica, str], None],
        on_healthy: Callable[[], None] = lambda: None,
    ) -> None:
        self.replica = replica
        self.client = client
        self.config = config
        self.on_unhealthy = on_unhealthy
        self.on_healthy = on_healthy
        self._warned_bad_load = False
        self._warned_models_refused = False

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.config.health_interval_s)

    async def check(self) -> bool:
        """One check; True when the replica is healthy."""
        timeout = httpx.Timeout(self.config.health_timeout_s)
        base = self.replica.url
        finished = self.replica.finished  # what the report below can't have counted as ended
        try:
            health, metrics, models = await asyncio.gather(
                self.client.get(base + "/health", timeout=timeout),
                self.client.get(base + "/metrics", timeout=timeout),
                self._served_models(timeout),
            )
        except httpx.HTTPError as e:
            return self._failed(f"health check failed: {type(e).__name__}")
        if health.status_code != 200:
            return self._failed(f"health check answered {health.status_code}")
        self._read_root_hash(health)
        if metrics.status_code == 200:
            self._read_load(metrics.text, finished)
        if models is not None:
            self._take_models(models)
        was_healthy = self.replica.healthy
        if not was_healthy:
            logger.info("replica %s is healthy again", base)
        self.replica.healthy = True
        self.replica.unhealthy_since = None
        self.replica.failures = 0
        if not was_healthy:
            self.on_healthy()
        return True

    def _read_root_hash(self, health: httpx.Response) -> None:
        """A pagedock engine's /health names its weights' identity (`root_hash`, as its KV
        snapshot does): known from the first check, so a stream that starts before the snapshot
        can still be resumed on the same weights. Absent (another engine): left as it is."""
        try:
            root = health.json().get("root_hash")
            if isinstance(root, str) and root:
                self.replica.root_hash = bytes.fromhex(root)
        except (ValueError, AttributeError):
            return

    def _read_load(self, text: str, finished: int) -> None:
        self.replica.load, rejected = parse_replica_load(text)
        self.replica.load_finished = finished
        if rejected and not self._warned_bad_load:
            # Once per replica: a replica that always reports Inf would flood the log every scrape.
            logger.warning(
                "replica %s reports unusable load metrics (ignored): %s",
                self.replica.url,
                ", ".join(rejected),
            )
            self._warned_bad_load = True

    async def _served_models(self, timeout: httpx.Timeout) -> ServedModels | None:
        """The replica's model list; None when it can't be had (the last one known stays)."""
        try:
            response = await self.client.get(
                self.replica.url + "/v1/models",
                timeout=timeout,
                headers=self.config.replica_auth_headers(),
            )
            if response.status_code == 200:
                return parse_model_list(response.json())
        except (httpx.HTTPError, ValueError):
            return None
        if response.status_code in (401, 403) and not self._warned_models_refused:
            logger.warning(
                "replica %s refused GET /v1/models with HTTP %d: check --replica-api-key "
                "(the router can't tell which LoRA adapters it serves)",
                self.replica.url,
                response.status_code,
            )
            self._warned_models_refused = True
        return None

    async def refresh_models(self) -> None:
        """Read the model list now, between checks (a request named a model no list has)."""
        models = await self._served_models(httpx.Timeout(self.config.health_timeout_s))
        if models is not None and self.replica.healthy:
            self._take_models(models)

    def _take_models(self, models: ServedModels) -> None:
        before = [] if self.replica.served_models is None else self.replica.served_models.adapters()
        if before != models.adapters():
            logger.info(
                "replica %s serves LoRA adapters: %s",
                self.replica.url,
                ", ".join(models.adapters()) or "none",
            )
        self.replica.served_models = models

    def _failed(self, why: str) -> bool:
        self.replica.failures += 1
        if self.replica.healthy:
            self.on_unhealthy(self.replica, why)
        return False
