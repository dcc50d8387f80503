"""Which blocks each request holds: prefix lookup, slot allocation per step, caching, freeing."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.block_pool import BlockPool
from engine.core.kv_cache_block import KVCacheBlock
from engine.core.kv_events import KVEvent
from engine.core.request import Request
from pagedock.kv.block_hash import BlockHash, lora_root_hash, request_root


@dataclass
class PrefixCacheStats:
    """Prompt tokens looked up in the prefix cache and tokens found there."""

    queries: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        root_hash: BlockHash,
        enable_caching: bool = True,
    ) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.root_hash = root_hash
        self.pool = BlockPool(num_blocks, block_size, enable_caching)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # The same blocks as ids, kept incrementally: the block table the runner reads each step.
        self.req_to_block_ids: dict[str, list[int]] = {}
        # How many leading blocks of each request are already published in the prefix cache.
        self.num_cached_blocks: dict[str, int] = {}
        self.prefix_cache_stats = PrefixCacheStats()
        # Each LoRA adapter's chains start from a root of its own (pagedock/kv/block_hash.py).
        self._lora_roots: dict[str, BlockHash] = {}
        # The weights each adapter name was first served with (their fingerprint).
        self._first_adapter_weights: dict[str, str] = {}

    @property
    def usage(self) -> float:
        return self.pool.usage

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request references (free-but-cached blocks count as free)."""
        return self.pool.num_free_blocks

    def take_events(self) -> list[KVEvent]:
        """The cache events recorded since the last call (stored / removed / cleared)."""
        return self.pool.take_events()

    def cached_block_hashes(self) -> list[BlockHash]:
        """Every block hash the prefix cache holds now."""
        return list(self.pool.cached_blocks)

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest run of the request's leading blocks already cached, and its token count.

        A full hit still leaves the last token to compute, so there are logits to sample from:
        the lookup stops one token short of the request's length. A request still owed prompt
        logprobs must compute the positions that give them: its hit stops before the first of
        those (vLLM skips the lookup for such requests altogether; here a recompute after a
        preemption still finds what it had computed).
        """
        if not self.enable_caching:
            return [], 0
        request.update_block_hashes(self.block_size, self._root_of(request))
        max_blocks = (request.num_tokens - 1) // self.block_size
        if request.prompt_logprobs is not None:
            max_blocks = min(max_blocks, request.num_computed_prompt_logprobs // self.block_size)
        blocks: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            blocks.append(block)
        return blocks, len(blocks) * self.block_size

    def record_prefix_lookup(self, num_queried: int, num_hit: int) -> None:
        """Count one admitted request's lookup (queried tokens, tokens found cached). Only at
        admission: a request that waits is looked up again every step, and counting each of
        those would inflate both counters."""
        if self.enable_caching:
            self.prefix_cache_stats.queries += num_queried
            self.prefix_cache_stats.hits += num_hit

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: list[KVCacheBlock] | None = None,
        num_new_computed_tokens: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Make room for num_new_tokens beyond what the request (and its prefix hit) covers.

        Returns the newly allocated blocks, or None (and changes nothing) when the pool can't
        serve the request now: the scheduler then preempts or waits.
        """
        computed = new_computed_blocks or []
        held = self.req_to_blocks.get(request.request_id, [])
        total_tokens = request.num_computed_tokens + num_new_computed_tokens + num_new_tokens
        num_new_blocks = max(self._blocks_for(total_tokens) - len(held) - len(computed), 0)
        # Prefix-hit blocks sitting in the free queue stop being allocatable once touched.
        num_revived = sum(1 for block in computed if block.ref_cnt == 0)
        if num_new_blocks + num_revived > self.pool.num_free_blocks:
            return None
        self.pool.touch(computed)
        new_blocks = self.pool.get_new_blocks(num_new_blocks)
        blocks = self.req_to_blocks.setdefault(request.request_id, [])
        blocks.extend(computed)
        blocks.extend(new_blocks)
        block_ids = self.req_to_block_ids.setdefault(request.request_id, [])
        block_ids.extend(block.block_id for block in computed)
        block_ids.extend(block.block_id for block in new_blocks)
        if computed:
            # Blocks found in the cache are already published.
            self.num_cached_blocks[request.request_id] = len(blocks) - len(new_blocks)
        return new_blocks

    def cache_blocks(self, request: Request) -> None:
        """Publish the request's blocks that its computed tokens have filled."""
        if not self.enable_caching:
            return
        request_id = request.request_id
        # NOTE: a verified draft counts as computed before its tokens are appended (the update
        # appends them after): only blocks of tokens the request already holds are cached now.
        num_full = min(request.num_computed_tokens, request.num_tokens) // self.block_size
        num_cached = self.num_cached_blocks.get(request_id, 0)
        if num_full <= num_cached:
            return
        request.update_block_hashes(self.block_size, self._root_of(request))
        blocks = self.req_to_blocks[request_id]
        parent = request.block_hashes[num_cached - 1] if num_cached else None
        bs = self.block_size
        self.pool.cache_full_blocks(
            blocks[num_cached:num_full],
            request.block_hashes[num_cached:num_full],
            parent,
            request.all_token_ids[num_cached * bs : num_full * bs],
            (request.lora_id, request.lora_name),  # the KV events name the adapter
            request.cache_salt,  # and the salt, for consumers that re-hash token ids
        )
        self.num_cached_blocks[request_id] = num_full

    def free(self, request: Request) -> None:
        """Return the request's blocks; its last blocks (least likely shared) are evicted first."""
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.req_to_block_ids.pop(request.request_id, None)
        self.num_cached_blocks.pop(request.request_id, None)
        self.pool.free_blocks(reversed(blocks))

    def get_block_ids(self, request_id: str) -> list[int]:
        """The request's block table (a live list: read it before the next allocation)."""
        return self.req_to_block_ids.get(request_id, [])

    def num_blocks_of(self, request_id: str) -> int:
        return len(self.req_to_blocks.get(request_id, ()))

    def set_adapter_weights(self, name: str, fingerprint: str) -> BlockHash:
        """The adapter `name` is served with the weights `fingerprint` names from now on (a start,
        or a load at run time); returns the root its chains start from. The weights the name was
        first served with keep the name's own root (`lora_root_hash(root, name)`, what a router
        derives), so a reload of the same files finds its blocks again; other weights under the
        name (unloaded, then loaded from a new revision) get a root of their own, so no block
        cached under other weights is ever found for them. Requests for an earlier load have all
        finished (engine/runtime/lora_adapters.py waits for them)."""
        first = self._first_adapter_weights.setdefault(name, fingerprint)
        key = name if fingerprint == first else f"{name}\x00{fingerprint}"
        root = self._lora_roots[name] = lora_root_hash(self.root_hash, key)
        return root

    def _root_of(self, request: Request) -> BlockHash:
        """Where the request's hash chain starts: the engine's root, or its adapter's, so KV
        never crosses from one adapter (or the base model) to another; salted by its
        `cache_salt`, so it never crosses from one salt (a tenant) to another either."""
        return request_root(self._adapter_root(request.lora_name), request.cache_salt)

    def _adapter_root(self, name: str | None) -> BlockHash:
        if name is None:
            return self.root_hash
        root = self._lora_roots.get(name)
        if root is None:
            root = self._lora_roots[name] = lora_root_hash(self.root_hash, name)
        return root

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)
