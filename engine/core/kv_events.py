"""Cache visibility, event-sourced: which block hashes the engine holds, as a stream of deltas.

The block pool records `BlockStored` / `BlockRemoved` / `AllBlocksCleared` as they happen; the
engine drains them once per step into a numbered `KVEventBatch` in a bounded `KVEventLog`. A
consumer (the router) takes a snapshot of every cached hash, then follows batches by sequence
number; a gap (it fell behind further than the log keeps) means: take a fresh snapshot.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from pagedock.kv.block_hash import BlockHash


@dataclass(frozen=True)
class BlockStored:
    """A run of consecutive full blocks of one request, now cached: `parent_block_hash` is the
    block before the first (None for a prompt's first block), and `token_ids` hold
    `block_size` tokens per block, in order (vLLM-format consumers re-hash them)."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    block_size: int
    token_ids: list[int] = field(default_factory=list)
    lora_id: int | None = None
    """The LoRA adapter the blocks were computed with: its load's id (vLLM's `lora_id`) and its
    name; both None for the base model (the hashes chain from the adapter's own root)."""
    lora_name: str | None = None
    cache_salt: str | None = None
    """The salt of the request the blocks were computed for (their chain's root is salted);
    None: unsalted. vLLM-format consumers read it from `extra_keys` to re-hash as we do."""


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: list[BlockHash]


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True)
class KVEventBatch:
    seq: int
    timestamp: float
    events: list[KVEvent] = field(default_factory=list)


@dataclass
class KVSnapshot:
    """Every cached block hash, and the sequence number of the last event batch it includes."""

    seq: int
    block_size: int
    block_hashes: list[BlockHash]


class KVEventLog:
    """A bounded, thread-safe log of event batches (the engine thread writes, servers read)."""

    def __init__(self, max_batches: int = 4096) -> None:
        self._batches: deque[KVEventBatch] = deque(maxlen=max_batches)
        self._next_seq = 0
        self._lock = threading.Lock()

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest batch; -1 before the first."""
        return self._next_seq - 1

    def publish(self, events: list[KVEvent]) -> KVEventBatch | None:
        if not events:
            return None
        with self._lock:
            batch = KVEventBatch(self._next_seq, time.time(), events)
            self._batches.append(batch)
            self._next_seq += 1
        return batch

    def since(self, seq: int) -> list[KVEventBatch] | None:
        """Batches after `seq`; None when some were already dropped (the consumer must resync)."""
        with self._lock:
            if seq >= self._next_seq - 1:
                return []
            if not self._batches or self._batches[0].seq > seq + 1:
                return None
            first = seq + 1 - self._batches[0].seq
            return list(self._batches)[first:]
