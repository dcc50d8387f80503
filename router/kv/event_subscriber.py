"""EventSubscriber: follows one replica's KV event stream (GET /v1/kv/events, NDJSON) into the
index.

    snapshot  -> the replica's block set is replaced (connect, after a gap, after a restart)
    batch     -> stored / removed / cleared applied in seq order; a gap forces a resubscribe
    heartbeat -> the stream is alive

A broken stream drops the replica's blocks from the index (the router can no longer vouch for
them) and is retried with exponential backoff (router/kv/subscriber_base.py); the next snapshot
rebuilds the view. A replica whose instance id changed (it restarted) is rebuilt from its new
snapshot, never from stale deltas. A failed health check leaves a live stream be
(replica_failed): its own heartbeats say whether it is alive.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx

from pagedock.http.internal_key import internal_key_headers
from router.config import RouterConfig
from router.kv.kv_index import KVIndex
from router.kv.subscriber_base import KVEventSubscriber
from router.metrics import RouterMetrics

if TYPE_CHECKING:
    from router.replicas.replica import Replica

logger = logging.getLogger("pagedock.router")
# NOTE: the engine sends a heartbeat after 10 s of silence; three missed ones mean a dead stream.
STREAM_READ_TIMEOUT_S = 30.0
# Blocks stored or dropped between two yields to the event loop: a 1M-block snapshot applied in
# one go stalls routing for seconds; in slices, requests are routed in between.
SLICE_BLOCKS = 16_384
# A snapshot over --max-snapshot-blocks will be as large on the next try: retry rarely.
TOO_LARGE_RETRY_S = 30.0
# One block in a snapshot line: 32 hex digits, two quotes, a comma and a space.
BYTES_PER_SNAPSHOT_BLOCK = 36


class ResyncNeeded(Exception):
    """The stream can't be applied as is (gap, new instance): reconnect for a fresh snapshot."""


class SnapshotTooLarge(Exception):
    """The replica's snapshot is over --max-snapshot-blocks: prefix affinity is off for it."""


class EventSubscriber(KVEventSubscriber):
    def __init__(
        self,
        replica: Replica,
        index: KVIndex,
        client: httpx.AsyncClient,
        config: RouterConfig,
        metrics: RouterMetrics,
    ) -> None:
        backoff_s = (config.event_backoff_min_s, config.event_backoff_max_s)
        super().__init__(replica, index, config, metrics, backoff_s)
        self.client = client

    def replica_failed(self) -> None:
        """The stream has its own liveness (heartbeats, STREAM_READ_TIMEOUT_S, the instance id),
        so a failed health check or request leaves it be: the replica is out of the candidate set
        while unhealthy anyway, its view stays current, and the stream keeps its place under the
        engine's --max-kv-event-subscribers (one slow check must not hand it to an idle client)."""

    def _failed(self, error: Exception) -> None:
        """A refusal or an oversized snapshot is shown on the replica; a broken stream, a gap or
        a new instance is routine (debug); anything else is logged with its traceback."""
        if isinstance(error, httpx.HTTPStatusError):
            self._refused(error.response.status_code)
        elif isinstance(error, SnapshotTooLarge):
            self._too_large(str(error))
        elif isinstance(error, httpx.HTTPError | ValueError | ResyncNeeded):
            logger.debug("KV events of %s: %s", self.replica.url, error)
        else:
            super()._failed(error)

    def _retry_delay_s(self, backoff_s: float) -> float:
        """An oversized snapshot will be as large on the next try: TOO_LARGE_RETRY_S then."""
        too_large = self.replica.kv_error is not None and "snapshot" in self.replica.kv_error
        return TOO_LARGE_RETRY_S if too_large else backoff_s

    def _refused(self, status: int) -> None:
        """The replica answered the subscription with an error status; 401/403 is a key problem
        an operator must see (warned once until a subscription succeeds, not every retry)."""
        if status not in (401, 403):
            logger.debug("KV events of %s: HTTP %d", self.replica.url, status)
            return
        if self.replica.kv_error is None:
            logger.warning(
                "KV events of %s refused with HTTP %d: check --replica-api-key "
                "(prefix affinity is off for it until it succeeds)",
                self.replica.url,
                status,
            )
        self.replica.kv_error = f"HTTP {status}: the replica refused the router's key"

    def _too_large(self, message: str) -> None:
        if self.replica.kv_error != message:  # warned once per size, not every retry
            logger.warning(
                "KV events of %s: %s; prefix affinity is off for it", self.replica.url, message
            )
        self.replica.kv_error = message

    async def _consume(self) -> None:
        url = self.replica.url + "/v1/kv/events"
        timeout = httpx.Timeout(STREAM_READ_TIMEOUT_S, connect=self.config.connect_timeout_s)
        max_line = self.config.max_snapshot_blocks * BYTES_PER_SNAPSHOT_BLOCK + 4096
        headers = {
            **self.config.replica_auth_headers(),
            **internal_key_headers(self.config.internal_api_key),
        }
        async with self.client.stream("GET", url, timeout=timeout, headers=headers) as response:
            response.raise_for_status()
            async for line in bounded_lines(response.aiter_bytes(), max_line):
                if not line.strip():
                    continue
                message = json.loads(line)
                if message.get("type") == "snapshot":
                    await self._apply_snapshot_in_slices(message)
                else:
                    self.apply(message)

    async def _apply_snapshot_in_slices(self, message: dict[str, Any]) -> None:
        hashes = self._snapshot_hashes(message)
        await self._drop_view()
        self.index.store(self.replica.url, ())
        for start in range(0, len(hashes), SLICE_BLOCKS):
            self.index.store(
                self.replica.url, (bytes.fromhex(h) for h in hashes[start : start + SLICE_BLOCKS])
            )
            await asyncio.sleep(0)
        self._adopt_snapshot(message)

    async def _drop_view(self) -> None:
        """In slices: the event loop routes requests between them."""
        while not self.index.drop_some(self.replica.url, SLICE_BLOCKS):
            await asyncio.sleep(0)

    def apply(self, message: dict[str, Any]) -> None:
        """One line of the stream."""
        self.replica.last_event_at = time.monotonic()
        kind = message.get("type")
        if kind == "snapshot":
            hashes = self._snapshot_hashes(message)
            self.index.reset(self.replica.url, (bytes.fromhex(h) for h in hashes))
            self._adopt_snapshot(message)
            return
        if message.get("instance_id") != self.replica.instance_id or not self.replica.kv_synced:
            raise ResyncNeeded(f"{kind} from an unknown instance {message.get('instance_id')}")
        if kind == "batch":
            self._apply_batch(message)

    def _snapshot_hashes(self, message: dict[str, Any]) -> list[str]:
        hashes: list[str] = message["block_hashes"]
        if len(hashes) > self.config.max_snapshot_blocks:
            raise SnapshotTooLarge(
                f"its snapshot of {len(hashes)} blocks is over --max-snapshot-blocks "
                f"{self.config.max_snapshot_blocks}"
            )
        return hashes

    def _adopt_snapshot(self, message: dict[str, Any]) -> None:
        """The snapshot's blocks are in the index: take its identity and sequence number."""
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
            parent = event.get("parent_block_hash")  # None: the run begins its chain
            self.index.store(url, hashes, None if parent is None else bytes.fromhex(parent))
        elif event["type"] == "removed":
            self.index.remove(url, hashes)
        elif event["type"] == "cleared":
            self.index.clear(url)


async def bounded_lines(chunks: AsyncIterator[bytes], max_bytes: int) -> AsyncIterator[bytes]:
    """The stream's lines; a line longer than `max_bytes` raises SnapshotTooLarge before it is
    held whole (only a snapshot line can be that long)."""
    buffer = bytearray()
    async for chunk in chunks:
        searched = len(buffer)  # the part before has no newline: don't scan it again
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", max(start, searched))) >= 0:
            yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
        if len(buffer) > max_bytes:
            raise SnapshotTooLarge(
                f"a line of its event stream is over {max_bytes} bytes (--max-snapshot-blocks)"
            )
    if buffer:
        yield bytes(buffer)
