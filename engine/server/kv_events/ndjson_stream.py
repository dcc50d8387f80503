"""GET /v1/kv/events: the engine's cached block hashes, as NDJSON lines for routers.

    {"type": "snapshot", "instance_id", "seq", "block_size", "block_hashes": [hex, ...],
     "root_hash"}
    {"type": "batch", "instance_id", "seq",
     "events": [{"type": "stored" | "removed" | "cleared", "block_hashes": [hex],
                 "parent_block_hash", "lora_name" (stored, for an adapter's blocks only)}]}
    {"type": "heartbeat", "instance_id", "seq"}          (after a quiet spell)

A consumer applies batches in seq order to the snapshot's set. The engine never waits for a
consumer: each has a bounded buffer, and one that falls behind loses its buffer and gets a fresh
snapshot instead (taken on the engine thread, so snapshot and seq always agree). At most
`max_consumers` streams are open at once (--max-kv-event-subscribers): one per router is the need,
and a stream that is never read holds its connection for as long as its client likes.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from engine.core.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVEventBatch,
    KVSnapshot,
)
from pagedock.kv.ndjson_events import (
    KVBatchMessage,
    KVEventWire,
    KVHeartbeatMessage,
    KVSnapshotMessage,
)

if TYPE_CHECKING:
    from engine.runtime.async_engine import AsyncEngine


class KVEventConsumer:
    """One subscriber's bounded buffer of encoded batch lines."""

    def __init__(self, max_batches: int) -> None:
        self.max_batches = max_batches
        self.overflowed = False
        self.closed = False
        self.last_seq = -1
        self._lines: deque[tuple[int, bytes]] = deque()
        self._ready = asyncio.Event()

    def offer(self, seq: int, line: bytes) -> None:
        if self.overflowed or self.closed:
            return
        if len(self._lines) >= self.max_batches:
            self.overflowed = True  # fell behind: drop everything, resync from a snapshot
            self._lines.clear()
        else:
            self._lines.append((seq, line))
        self._ready.set()

    def resync(self) -> None:
        self.overflowed = True
        self._lines.clear()
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    def restart_after(self, snapshot_seq: int) -> None:
        """A snapshot at `snapshot_seq` was sent: older buffered batches are already in it."""
        self.overflowed = False
        self.last_seq = snapshot_seq
        while self._lines and self._lines[0][0] <= snapshot_seq:
            self._lines.popleft()

    async def lines(self, heartbeat_s: float, instance_id: str) -> AsyncIterator[bytes]:
        """Buffered lines as they come; returns on overflow (resync) or close."""
        while not self.closed:
            if not self._lines and not self.overflowed:
                try:
                    await asyncio.wait_for(self._ready.wait(), heartbeat_s)
                except TimeoutError:
                    yield _line(KVHeartbeatMessage(instance_id=instance_id, seq=self.last_seq))
                    continue
            self._ready.clear()
            if self.overflowed or self.closed:
                return
            while self._lines:
                seq, line = self._lines.popleft()
                self.last_seq = seq
                yield line


class KVEventHub:
    """Fans the engine's per-step KV event batches out to every consumer of the stream."""

    def __init__(
        self,
        engine: AsyncEngine,
        instance_id: str,
        root_hash: bytes,
        max_buffered_batches: int = 1024,
        heartbeat_s: float = 10.0,
        max_consumers: int = 0,
    ) -> None:
        self.engine = engine
        self.instance_id = instance_id
        self.max_buffered_batches = max_buffered_batches
        self.max_consumers = max_consumers  # 0 = no limit
        self.heartbeat_s = heartbeat_s
        self.consumers: set[KVEventConsumer] = set()
        self.root_hash = root_hash.hex()  # published so routers hash as we do
        engine.add_kv_listener(self._on_batches)

    def _on_batches(self, batches: list[KVEventBatch] | None) -> None:
        if batches is None:
            for consumer in self.consumers:
                consumer.resync()
            return
        for batch in batches:
            line = encode_batch(batch, self.instance_id)  # once, whatever the number of consumers
            for consumer in self.consumers:
                consumer.offer(batch.seq, line)

    def subscribe(self) -> KVEventConsumer | None:
        """A new consumer, fed from now on; None when `max_consumers` are open already."""
        if self.max_consumers and len(self.consumers) >= self.max_consumers:
            return None
        consumer = KVEventConsumer(self.max_buffered_batches)
        self.consumers.add(consumer)  # before the snapshot, so no batch after it is missed
        return consumer

    def unsubscribe(self, consumer: KVEventConsumer) -> None:
        consumer.close()
        self.consumers.discard(consumer)

    async def stream(self, consumer: KVEventConsumer) -> AsyncIterator[bytes]:
        """A consumer's lines: a snapshot, then batches; a fresh snapshot after falling behind."""
        try:
            while not consumer.closed:
                snapshot = await self.engine.kv_snapshot()
                consumer.restart_after(snapshot.seq)
                yield encode_snapshot(snapshot, self.instance_id, self.root_hash)
                async for line in consumer.lines(self.heartbeat_s, self.instance_id):
                    yield line
        finally:
            self.consumers.discard(consumer)

    def close_all(self) -> None:
        """End every stream (shutdown): their HTTP responses complete."""
        for consumer in self.consumers:
            consumer.close()


class KVEventResponse(StreamingResponse):
    """One subscriber's stream. Its slot under the hub's cap is given back when the response
    ends, however it ends: a client gone before the first line included (the body's generator,
    never started, would not run its own cleanup)."""

    def __init__(self, hub: KVEventHub, consumer: KVEventConsumer) -> None:
        super().__init__(hub.stream(consumer), media_type="application/x-ndjson")
        self._hub, self._consumer = hub, consumer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._hub.unsubscribe(self._consumer)


def encode_snapshot(snapshot: KVSnapshot, instance_id: str, root_hash: str | None = None) -> bytes:
    message = KVSnapshotMessage(
        instance_id=instance_id,
        seq=snapshot.seq,
        block_size=snapshot.block_size,
        block_hashes=[h.hex() for h in snapshot.block_hashes],
        root_hash=root_hash,
    )
    return _line(message)


def encode_batch(batch: KVEventBatch, instance_id: str) -> bytes:
    events = [_wire_event(e) for e in batch.events]
    return _line(KVBatchMessage(instance_id=instance_id, seq=batch.seq, events=events))


def _wire_event(event: KVEvent) -> KVEventWire:
    if isinstance(event, BlockStored):
        parent = event.parent_block_hash
        return KVEventWire(
            type="stored",
            block_hashes=[h.hex() for h in event.block_hashes],
            parent_block_hash=None if parent is None else parent.hex(),
            lora_name=event.lora_name,
        )
    if isinstance(event, BlockRemoved):
        return KVEventWire(type="removed", block_hashes=[h.hex() for h in event.block_hashes])
    assert isinstance(event, AllBlocksCleared)
    return KVEventWire(type="cleared")


def _line(message: KVSnapshotMessage | KVBatchMessage | KVHeartbeatMessage) -> bytes:
    return json.dumps(message.model_dump(), separators=(",", ":")).encode() + b"\n"
