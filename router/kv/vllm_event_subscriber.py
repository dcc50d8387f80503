"""VllmEventSubscriber: follows one vLLM replica's KV events (ZMQ, vLLM's wire format) into the
index.

    connect  -> SUB to tcp://<replica host>:--kv-events-port, then replay from seq 0 (vLLM has no
                snapshot: the view is as complete as its replay buffer)
    live     -> apply in seq order; a duplicate (replay overlap) is dropped; a gap is replayed
                from the replica's ROUTER socket; a live seq going backwards means the replica
                restarted: its view is dropped and rebuilt from seq 0
    cleared  -> AllBlocksCleared drops the replica's entries (the view is exact again)

`/router/replicas` reports how complete the view is: batches known lost and blocks that could not
be chained (their parent was announced before anything the router could see). An attempt that
fails is retried every --event-backoff-max-s (router/kv/subscriber_base.py's loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from pagedock.kv.vllm_events import (
    END_SEQ,
    ClearedEvent,
    WireBatch,
    decode_payload,
    seq_from_bytes,
)
from router.config import RouterConfig
from router.kv.kv_index import KVIndex
from router.kv.subscriber_base import KVEventSubscriber
from router.kv.vllm_kv_view import SeqTracker, VllmKVView, chain_root
from router.metrics import RouterMetrics

if TYPE_CHECKING:
    from router.replicas.replica import Replica

logger = logging.getLogger("pagedock.router")


def zmq_endpoint(replica_url: str, port: int) -> str:
    host = urlsplit(replica_url).hostname or "127.0.0.1"
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class VllmEventSubscriber(KVEventSubscriber):
    stream_name = "vLLM KV events"

    def __init__(
        self, replica: Replica, index: KVIndex, config: RouterConfig, metrics: RouterMetrics
    ) -> None:
        # A fixed delay, not a growing one: every retry waits --event-backoff-max-s.
        backoff_s = (config.event_backoff_max_s, config.event_backoff_max_s)
        super().__init__(replica, index, config, metrics, backoff_s)
        self.view = VllmKVView(replica.url, index)
        self.seq = SeqTracker()
        self._ctx = zmq.asyncio.Context.instance()
        self._pending_live: tuple[int, bytes] | None = None
        """The live batch that showed a gap: applied after the replay that fills it."""
        replica.kind = "vllm"
        replica.root_hash = chain_root(None)

    async def _drop_view(self) -> None:
        """The view is rebuilt by the next attempt's replay."""
        self._reset_view()

    async def _consume(self) -> None:
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, self.config.kv_events_topic.encode())
        sub.connect(zmq_endpoint(self.replica.url, self.config.kv_ports(self.replica.url)[0]))
        try:
            await self._catch_up()  # whatever the replay buffer holds, before the live stream
            self.replica.kv_synced = True
            while True:
                _topic, seq_frame, payload = await sub.recv_multipart()
                self._on_live(seq_from_bytes(seq_frame), payload)
                if self._pending_live is not None:
                    await self._catch_up()
        finally:
            sub.close()

    def _on_live(self, seq: int, payload: bytes) -> None:
        action = self.seq.classify_live(seq)
        if action == "restart":
            logger.info(
                "vLLM replica %s restarted its KV events (seq %d): rebuilding its view",
                self.replica.url,
                seq,
            )
            self._reset_view()
            self.seq.last_live_seq = seq
            action = "apply" if seq == 0 else "gap"
        if action == "duplicate":
            return
        if action == "gap":
            self._pending_live = (seq, payload)
            return
        self._apply(seq, decode_payload(payload))

    async def _catch_up(self) -> None:
        """Replay from the first batch not applied; then the live batch that showed the gap."""
        for seq, payload in await self._replay(self.seq.applied_seq + 1):
            self._apply(seq, decode_payload(payload))
        pending, self._pending_live = self._pending_live, None
        if pending is not None:
            self._apply(pending[0], decode_payload(pending[1]))

    async def _replay(self, start: int) -> list[tuple[int, bytes]]:
        """vLLM's replay protocol; empty without a replay port or when it does not answer in
        time (the batches it would have held then count as missed)."""
        replay_port = self.config.kv_ports(self.replica.url)[1]
        if not replay_port:
            return []
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(zmq_endpoint(self.replica.url, replay_port))
        batches: list[tuple[int, bytes]] = []
        try:
            await dealer.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
            async with asyncio.timeout(self.config.kv_replay_timeout_s):
                while True:
                    frames = await dealer.recv_multipart()
                    seq = seq_from_bytes(frames[-2])
                    if seq == END_SEQ:
                        return batches
                    batches.append((seq, frames[-1]))
        except TimeoutError:
            logger.warning(
                "vLLM KV event replay from %s timed out after %d batches",
                self.replica.url,
                len(batches),
            )
            return batches
        finally:
            dealer.close()

    def _apply(self, seq: int, batch: WireBatch) -> None:
        if not self.seq.accept(seq):
            return
        self.replica.last_event_at = time.monotonic()
        self.view.apply(batch.events)
        if any(isinstance(e, ClearedEvent) for e in batch.events):
            self.seq.missed_batches = 0  # the view is exact again from here
        self._publish_state()

    def _publish_state(self) -> None:
        r = self.replica
        r.kv_seq = self.seq.applied_seq
        r.kv_missed_batches = self.seq.missed_batches
        r.kv_unchained_blocks = self.view.unchained_blocks
        if self.view.block_size is not None:
            r.block_size = self.view.block_size

    def _reset_view(self) -> None:
        self.view.forget()
        self.seq.restart()
        self.replica.kv_synced = False
        self._publish_state()
