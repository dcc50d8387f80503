"""Warm start: a replica that joins while others serve is sent the router's hottest prompt
prefixes (HotPrefixes) as one-token completions before it becomes a routing candidate, so its
first requests find the tenants' shared prefixes cached instead of all missing.

The first replica of an empty set is never held back (requests may be waiting for it), and
warming is bounded: at most `warm_prefixes` prompts, two at a time, within `warm_timeout_s`; a
failure ends it early. Either way the replica then takes its share.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from router.config import RouterConfig
from router.kv.hot_prefixes import HotPrefix, HotPrefixes
from router.replicas.replica import Replica

logger = logging.getLogger("pagedock.router")
WARM_CONCURRENCY = 2


class Warmer:
    def __init__(self, config: RouterConfig, hot: HotPrefixes, client: httpx.AsyncClient) -> None:
        self.config = config
        self.hot = hot
        self.client = client

    def wants(self, others_serving: bool) -> bool:
        return self.config.warm_prefixes > 0 and others_serving and len(self.hot) > 0

    async def warm(self, replica: Replica) -> int:
        """Send the hottest prefixes; returns how many the replica prefilled."""
        prompts = self.hot.hottest(self.config.warm_prefixes)
        gate = asyncio.Semaphore(WARM_CONCURRENCY)
        try:
            async with asyncio.timeout(self.config.warm_timeout_s):
                done = await asyncio.gather(*(self._one(replica, p, gate) for p in prompts))
        except TimeoutError:
            logger.warning(
                "warming %s took over %s s; it takes its share now",
                replica.url,
                self.config.warm_timeout_s,
            )
            return 0
        logger.info("warmed %s with %d of %d hot prefixes", replica.url, sum(done), len(prompts))
        return sum(done)

    async def _one(self, replica: Replica, prefix: HotPrefix, gate: asyncio.Semaphore) -> bool:
        body = {"prompt": list(prefix.token_ids), "max_tokens": 1, "temperature": 0}
        if prefix.cache_salt is not None:  # onto the chain its tenant's requests look up
            body["cache_salt"] = prefix.cache_salt
        headers = (
            {"authorization": f"Bearer {self.config.replica_api_key}"}
            if self.config.replica_api_key
            else {}
        )
        async with gate:
            try:
                response = await self.client.post(
                    replica.url + "/v1/completions", json=body, headers=headers
                )
            except httpx.HTTPError as e:
                logger.warning("warming %s failed: %s", replica.url, type(e).__name__)
                return False
        return response.status_code == 200
