"""EventSubscriber: follows one replica's KV event stream (GET /v1/kv/events, NDJSON) into the index.

    snapshot  -> the replica's block set is replaced (connect, after a gap, after a restart)
    batch     -> stored / removed / cleared applied in seq order; a gap forces a resubscribe
    heartbeat -> the stream is alive

A broken stream drops the replica's blocks from the index (the router can no longer vouch for
them) and is retried with exponential backoff; the next snapshot rebuilds the view. A replica whose
instance id changed (it restarted) is rebuilt from its new snapshot, never from stale deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import httpx

from router.config import RouterConfig
from router.kv_index import KVIndex
from router.metrics import RouterMetrics
from router.replica import Replica

logger = logging.getLogger("pagedock.router")
# NOTE: the engine sends a heartbeat after 10 s of silence; three missed ones mean a dead stream.
STREAM_READ_TIMEOUT_S = 30.0


class ResyncNeeded(Exception):
    """The stream can't be applied as is (gap, new instance): reconnect for a fresh snapshot."""


class EventSubscriber:
    def __init__(
        self,
        replica: Replica,
        index: KVIndex,
        client: httpx.AsyncClient,
        config: RouterConfig,
        metrics: RouterMetrics,
    ) -> None:
        self.replica = replica
        self.index = index
        self.client = client
        self.config = config
        self.metrics = metrics
        self._attempt: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Subscribe until cancelled."""
        backoff_s = self.config.event_backoff_min_s
        while True:
            self._attempt = asyncio.create_task(self._consume())
            try:
                await self._attempt
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # run() itself was cancelled, not just this attempt
            except httpx.HTTPStatusError as e:
                self._refused(e.response.status_code)
            except (httpx.HTTPError, ValueError, ResyncNeeded) as e:
                logger.debug("KV events of %s: %s", self.replica.url, e)
            except Exception:  # a malformed line must not end the subscription for good
                logger.exception("KV events of %s: unexpected error", self.replica.url)
            self.index.drop(self.replica.url)
            if self.replica.kv_synced:  # it had a snapshot: a fresh failure, retry quickly
                backoff_s = self.config.event_backoff_min_s
            self.replica.kv_synced = False
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self.config.event_backoff_max_s)

    def resubscribe(self) -> None:
        """Drop the current stream (the replica failed a check); run() reconnects after backoff."""
        if self._attempt is not None and not self._attempt.done():
            self._attempt.cancel()

    def _refused(self, status: int) -> None:
        """The replica answered the subscription with an error status; 401/403 is a key problem
        an operator must see (warned once until a subscription succeeds, not every retry)."""
        if status not in (401, 403):
            logger.debug("KV events of %s: HTTP %d", self.replica.url, status)
            return
        if self.replica.kv_error is None:
            logger.warning("KV events of %s refused with HTTP %d: check --replica-api-key (prefix affinity is off for it until it succeeds)", self.replica.url, status)  # fmt: skip
        self.replica.kv_error = f"HTTP {status}: the replica refused the router's key"

    async def _consume(self) -> None:
        url = self.replica.url + "/v1/kv/events"
        timeout = httpx.Timeout(STREAM_READ_TIMEOUT_S, connect=self.config.connect_timeout_s)
        async with self.client.stream("GET", url, timeout=timeout, headers=self._headers()) as response:  # fmt: skip
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.strip():
                    self.apply(json.loads(line))

    def _headers(self) -> dict[str, str]:
        key = self.config.replica_api_key or self.config.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def apply(self, message: dict[str, Any]) -> None:
        """One line of the stream."""
        self.replica.last_event_at = time.monotonic()
        kind = message.get("type")
        if kind == "snapshot":
            self._apply_snapshot(message)
            return
        if message.get("instance_id") != self.replica.instance_id or not self.replica.kv_synced:
            raise ResyncNeeded(f"{kind} from an unknown instance {message.get('instance_id')}")
        if kind == "batch":
            self._apply_batch(message)

    def _apply_snapshot(self, message: dict[str, Any]) -> None:
        r = self.replica
        if r.instance_id is not None and r.instance_id != message["instance_id"]:
            logger.info("replica %s restarted (instance %s)", r.url, message["instance_id"])
        r.instance_id = message["instance_id"]
        r.block_size = int(message["block_size"])
        root = message.get("root_hash")
        r.root_hash = bytes.fromhex(root) if root else None
        r.kv_seq = int(message["seq"])
        r.kv_synced = True
        r.kv_error = None
        self.index.reset(r.url, (bytes.fromhex(h) for h in message["block_hashes"]))
        self.metrics.observe_resync(r.url)

    def _apply_batch(self, message: dict[str, Any]) -> None:
        seq = int(message["seq"])
        if seq <= self.replica.kv_seq:
            return  # already in the snapshot
        if seq != self.replica.kv_seq + 1:
            raise ResyncNeeded(f"gap in KV events: seq {seq} after {self.replica.kv_seq}")
        for event in message["events"]:
            self._apply_event(event)
        self.replica.kv_seq = seq

    def _apply_event(self, event: dict[str, Any]) -> None:
        url = self.replica.url
        hashes = (bytes.fromhex(h) for h in event.get("block_hashes", ()))
        if event["type"] == "stored":
            self.index.store(url, hashes)
        elif event["type"] == "removed":
            self.index.remove(url, hashes)
        elif event["type"] == "cleared":
            self.index.clear(url)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
