"""VllmKVView: one vLLM-event replica's blocks in the index, re-hashed with pagedock's block hash.

A vLLM replica's block hashes depend on its hash function and seed, so they are treated as opaque
ids (as llm-d and Dynamo do): each BlockStored's `token_ids` are re-hashed with pagedock's chained
hash, starting from the router's own root for a first block, or from the pagedock hash the parent
id was mapped to. The id -> hash map turns BlockRemoved ids back into index entries. A store whose
parent id is unknown (announced before the router subscribed, beyond the replay buffer) cannot be
chained: its blocks are counted as unchained and stay out of the index. A salted chain's first
block names its `cache_salt` in `extra_keys`: the chain then starts from the salted root, as a
salted request's blocks are hashed (PromptBlocks); a first block with keys the router cannot
re-hash (multimodal ones) is unchained too.

SeqTracker is the stream's bookkeeping: which batch to apply, which is a duplicate (a replay and
the live stream overlap), which means the publisher restarted (a live seq not above the previous
live seq), and which leaves a gap to replay.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pagedock.kv.block_hash import BlockHash, hash_block, request_root, root_hash
from pagedock.kv.vllm_events import (
    ClearedEvent,
    OpaqueHash,
    RemovedEvent,
    StoredEvent,
    UnhashableKeys,
    WireEvent,
    chain_salt,
)
from router.kv.kv_index import KVIndex

# The router's root for chains re-hashed from vLLM events; any constant works, since the router
# hashes both the events' tokens and the prompts with it.
VLLM_ROOT = root_hash("pagedock-router:vllm-events")
GPU_MEDIA = (None, "GPU")  # CPU / storage tiers hold blocks a prefill can't reuse as is

LiveAction = Literal["apply", "duplicate", "restart", "gap"]


def chain_root(lora_name: str | None) -> BlockHash:
    return (
        VLLM_ROOT
        if lora_name is None
        else root_hash("pagedock-router:vllm-events", [f"lora:{lora_name}"])
    )


@dataclass
class SeqTracker:
    applied_seq: int = -1
    """The last batch applied to the view (from the live stream or a replay)."""
    last_live_seq: int = -1
    """The last seq seen on the live stream; a live seq not above it means a new publisher."""
    missed_batches: int = 0
    """Batches known lost (neither received live nor replayable) since the view was last exact."""

    def classify_live(self, seq: int) -> LiveAction:
        if self.last_live_seq >= 0 and seq <= self.last_live_seq:
            return "restart"
        self.last_live_seq = seq
        if seq <= self.applied_seq:
            return "duplicate"
        return "apply" if seq == self.applied_seq + 1 else "gap"

    def accept(self, seq: int) -> bool:
        """A batch (live after a gap, or replayed) in order: False for one already applied; the
        batches skipped to reach it count as missed."""
        if seq <= self.applied_seq:
            return False
        self.missed_batches += seq - self.applied_seq - 1
        self.applied_seq = seq
        return True

    def restart(self) -> None:
        self.applied_seq = self.last_live_seq = -1
        self.missed_batches = 0


class VllmKVView:
    def __init__(self, replica: str, index: KVIndex) -> None:
        self.replica = replica
        self.index = index
        self.block_size: int | None = None
        self.unchained_blocks = 0
        """Stored blocks whose parent id was unknown: not indexed since the view was last exact."""
        self._ids: dict[OpaqueHash, BlockHash] = {}
        self._refs: Counter[BlockHash] = Counter()

    @property
    def num_ids(self) -> int:
        return len(self._ids)

    def apply(self, events: list[WireEvent]) -> None:
        for event in events:
            if isinstance(event, StoredEvent):
                self._stored(event)
            elif isinstance(event, RemovedEvent):
                self._removed(event)
            elif isinstance(event, ClearedEvent):
                self.forget()

    def forget(self) -> None:
        """Drop every block of the replica (AllBlocksCleared, a publisher restart)."""
        self.index.clear(self.replica)
        self._ids.clear()
        self._refs.clear()
        self.unchained_blocks = 0

    def _stored(self, event: StoredEvent) -> None:
        if event.medium not in GPU_MEDIA:
            return
        bs = event.block_size
        if bs < 1 or len(event.token_ids) != bs * len(event.block_hashes):
            raise ValueError(
                f"BlockStored with {len(event.token_ids)} token ids for "
                f"{len(event.block_hashes)} blocks of {bs}"
            )
        self.block_size = bs
        prev = self._parent(event)
        if prev is None:
            self.unchained_blocks += len(event.block_hashes)
            return
        # The block before the first new one: the index groups the new blocks by its chain
        # (None: the first new block begins the chain).
        before: BlockHash | None = None if event.parent_block_hash is None else prev
        new: list[BlockHash] = []
        for i, block_id in enumerate(event.block_hashes):
            h = hash_block(prev, event.token_ids[i * bs : (i + 1) * bs])
            if block_id not in self._ids:  # else announced again: already counted
                self._ids[block_id] = h
                self._refs[h] += 1
                new.append(h)
            elif not new:
                before = h
            prev = h
        self.index.store(self.replica, new, before)

    def _parent(self, event: StoredEvent) -> BlockHash | None:
        """The pagedock hash the run chains from: its parent's, or its chain's (salted) root;
        None when it cannot be chained."""
        parent = event.parent_block_hash
        if parent is not None:
            return self._ids.get(parent)
        try:
            return request_root(chain_root(event.lora_name), chain_salt(event))
        except UnhashableKeys:
            return None

    def _removed(self, event: RemovedEvent) -> None:
        if event.medium not in GPU_MEDIA:
            return
        gone: list[BlockHash] = []
        for block_id in event.block_hashes:
            h = self._ids.pop(block_id, None)
            if h is None:
                continue
            self._refs[h] -= 1
            if self._refs[h] <= 0:
                del self._refs[h]
                gone.append(h)
        self.index.remove(self.replica, gone)
