"""One physical KV block's metadata (the tensors live in the model runner)."""

from __future__ import annotations

from pagedock.kv.block_hash import BlockHash


class KVCacheBlock:
    """A block of `block_size` KV slots. `ref_cnt` counts the requests using it; a block with
    ref_cnt 0 sits in the free queue, and keeps its hash (so a prefix hit can revive it) until it is
    handed out again."""

    __slots__ = ("block_hash", "block_id", "next_free", "prev_free", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None

    def __repr__(self) -> str:
        cached = "cached" if self.block_hash is not None else "uncached"
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, {cached})"
