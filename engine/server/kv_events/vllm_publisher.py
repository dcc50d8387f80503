"""VllmKVPublisher: the engine's KV events in vLLM's wire format, on a ZMQ PUB socket, with replay.

    engine loop --(KVEventBatch, on the event loop)--> numbered, queued --(publisher thread)-->
        PUB  [topic, seq, payload]          every subscriber
        ROUTER replay: [start seq] in  ->   [topic, seq, payload] per buffered batch, then [-1]

Sequence numbers are this publisher's own (0, 1, 2, ... from start-up), assigned as batches are
queued: a batch dropped because the queue is full leaves a gap a subscriber sees. The sockets
are used only by the publisher thread (ZMQ sockets are not thread-safe). pagedock's own NDJSON
stream with snapshots (kv_events_stream.py) runs beside this one, unchanged.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from typing import Any

import zmq

from engine.core.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent, KVEventBatch
from pagedock.kv.vllm_events import (
    END_SEQ,
    KVEventsConfig,
    all_blocks_cleared,
    block_extra_keys,
    block_removed,
    block_stored,
    encode_payload,
    is_bind_endpoint,
    seq_bytes,
    to_uint64,
)

logger = logging.getLogger("pagedock.server")
DP_RANK = 0  # vLLM's publisher fills in its data-parallel rank; one engine is rank 0
_POLL_S = 0.05


class VllmKVPublisher:
    def __init__(self, config: KVEventsConfig) -> None:
        self.config = config
        self.topic = config.topic.encode()
        self.num_dropped_batches = 0
        self._next_seq = 0
        self._queue: queue.Queue[tuple[int, float, list[Any]] | None] = queue.Queue(
            config.max_queue_size
        )
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._pub, self._replay = self._open_sockets()
        self._thread = threading.Thread(target=self._run, name="pagedock-kv-zmq", daemon=True)
        self._thread.start()

    @property
    def endpoints(self) -> tuple[str, str | None]:
        """The PUB and ROUTER addresses actually in use (a tcp://*:0 port resolved)."""
        pub = self._pub.getsockopt_string(zmq.LAST_ENDPOINT) or self.config.endpoint
        replay = self._replay.getsockopt_string(zmq.LAST_ENDPOINT) if self._replay else None
        return pub, replay

    def _open_sockets(self) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes] | None]:
        pub = self._ctx.socket(zmq.PUB)
        pub.set_hwm(self.config.hwm)
        pub.setsockopt(zmq.LINGER, 0)
        try:
            if is_bind_endpoint(self.config.endpoint):
                pub.bind(self.config.endpoint)
            else:
                pub.connect(self.config.endpoint)
            replay = None
            if self.config.replay_endpoint:
                replay = self._ctx.socket(zmq.ROUTER)
                replay.setsockopt(zmq.LINGER, 0)
                replay.bind(self.config.replay_endpoint)
        except zmq.ZMQError as e:
            pub.close()
            from pagedock.errors import ConfigError

            raise ConfigError(
                f"kv-events-config: cannot open {self.config.endpoint} / "
                f"{self.config.replay_endpoint}: {e}"
            ) from e
        return pub, replay

    # ---- the engine side (event loop) ----------------------------------------------------------

    def on_batches(self, batches: list[KVEventBatch] | None) -> None:
        """A KV listener: each engine batch becomes one numbered vLLM batch."""
        if batches is None:
            # The engine's log dropped batches before we read them: what they changed is lost,
            # so tell consumers to forget this replica's blocks rather than keep a wrong view.
            logger.warning("KV events were lost before publishing; publishing AllBlocksCleared")
            self._enqueue(0.0, [all_blocks_cleared(self.config.event_encoding)])
            return
        for batch in batches:
            self._enqueue(batch.timestamp, [self._wire(e) for e in batch.events])

    def _enqueue(self, ts: float, events: list[Any]) -> None:
        seq = self._next_seq
        self._next_seq += 1
        try:
            self._queue.put_nowait((seq, ts, events))
        except queue.Full:  # never block the event loop; the gap is visible in seq
            self.num_dropped_batches += 1

    def _wire(self, event: KVEvent) -> Any:
        encoding = self.config.event_encoding
        if isinstance(event, BlockStored):
            parent = event.parent_block_hash
            hashes = [to_uint64(h) for h in event.block_hashes]
            parent_id = None if parent is None else to_uint64(parent)
            return block_stored(
                hashes,
                parent_id,
                event.token_ids,
                event.block_size,
                encoding,
                lora_id=event.lora_id,
                lora_name=event.lora_name,
                extra_keys=block_extra_keys(
                    len(hashes), parent is None, event.lora_name, event.cache_salt
                ),
            )
        if isinstance(event, BlockRemoved):
            return block_removed([to_uint64(h) for h in event.block_hashes], encoding)
        assert isinstance(event, AllBlocksCleared)
        return all_blocks_cleared(encoding)

    def close(self) -> None:
        """Publish what is queued (briefly), then stop the thread and close the sockets."""
        try:
            self._queue.put(None, timeout=1.0)
        except queue.Full:  # a stuck publisher thread must not hold up shutdown
            logger.warning("KV event publisher queue still full at shutdown")
        self._thread.join(timeout=2.0)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)

    # ---- the publisher thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._serve_replays()
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if item is None:
                return
            self._publish(*item)

    def _publish(self, seq: int, ts: float, events: list[Any]) -> None:
        payload = encode_payload(ts, events, DP_RANK)
        try:
            self._pub.send_multipart((self.topic, seq_bytes(seq), payload))
        except zmq.ZMQError as e:  # a slow or absent subscriber must never stop the engine
            logger.warning("KV event batch %d not sent: %s", seq, e)
        self._buffer.append((seq, payload))

    def _serve_replays(self) -> None:
        if self._replay is None:
            return
        while self._replay.poll(0):
            frames = self._replay.recv_multipart()
            if len(frames) < 2 or len(frames[-1]) != 8:
                logger.warning(
                    "ignoring a malformed KV event replay request (%d frames)", len(frames)
                )
                continue
            envelope = frames[:-1]  # identity (and the empty delimiter a REQ socket adds)
            start = int.from_bytes(frames[-1], "big", signed=True)
            for seq, payload in list(self._buffer):
                if seq >= start:
                    self._replay.send_multipart((*envelope, self.topic, seq_bytes(seq), payload))
            self._replay.send_multipart((*envelope, b"", seq_bytes(END_SEQ), b""))
