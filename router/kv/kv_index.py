"""KVIndex: which replica holds which KV block, as an index from block hash to replicas.

Per replica the index keeps the set of cached block hashes its event stream reported (snapshot,
then stored / removed / cleared deltas); the inverted map hash -> replicas answers "how many of
this request's leading blocks does each replica hold" in time proportional to the request's
blocks, never to the cache size.

Besides confirmed blocks, a routed request's blocks count as *pending* on its replica for a short
while (until the replica's stored event confirms them, or the TTL passes): the next request of the
same tenant, arriving before the first one's prefill ran, then follows it instead of scattering.

Confirmed blocks are also grouped by the prefix they belong to (router/kv/prefix_groups.py), for
people to see where each prefix lives (the router's /dashboard).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from pagedock.kv.block_hash import BlockHash
from router.kv.prefix_groups import UNTRACED, PrefixGroups


class KVIndex:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._holders: dict[BlockHash, set[str]] = {}
        self._blocks: dict[str, set[BlockHash]] = {}
        # Pending blocks: hash -> {replica: expiry}; a FIFO of (expiry, hash, replica) to expire.
        self._pending: dict[BlockHash, dict[str, float]] = {}
        self._expiries: deque[tuple[float, BlockHash, str]] = deque()
        self.groups = PrefixGroups()

    # ---- replica lifecycle -------------------------------------------------------------------

    def reset(self, replica: str, hashes: Iterable[BlockHash]) -> None:
        """Replace everything known of `replica` by a snapshot."""
        self.drop(replica)
        self._blocks[replica] = set()
        self.store(replica, hashes)

    def drop(self, replica: str) -> None:
        """Forget every block of `replica` (it died, restarted, or its stream broke)."""
        self.groups.forget_replica(replica)
        for h in self._blocks.pop(replica, ()):
            self._discard_holder(h, replica)

    def drop_some(self, replica: str, limit: int) -> bool:
        """Forget up to `limit` blocks of `replica`; True once none is left (a large view is
        dropped in slices, so the event loop can route between them)."""
        blocks = self._blocks.get(replica)
        if blocks is None:
            return True
        dropped = [blocks.pop() for _ in range(min(limit, len(blocks)))]
        self.groups.removed(replica, dropped)
        for h in dropped:
            self._discard_holder(h, replica)
        if blocks:
            return False
        del self._blocks[replica]
        return True

    def num_blocks(self, replica: str) -> int:
        return len(self._blocks.get(replica, ()))

    def replicas(self) -> list[str]:
        return list(self._blocks)

    # ---- deltas --------------------------------------------------------------------------------

    def store(
        self, replica: str, hashes: Iterable[BlockHash], parent: BlockHash | None = UNTRACED
    ) -> None:
        """`hashes`, a run of consecutive blocks after `parent` (None: the run begins its chain;
        UNTRACED: unknown, as a snapshot's blocks), are cached on `replica`."""
        blocks = self._blocks.setdefault(replica, set())
        holders, pending = self._holders, self._pending
        run = hashes if isinstance(hashes, list) else list(hashes)
        new: list[BlockHash] = []
        for h in run:
            if h not in blocks:
                blocks.add(h)
                holders.setdefault(h, set()).add(replica)
                new.append(h)
            waiting = pending.get(h)
            if waiting is not None:
                waiting.pop(replica, None)
        if new:
            self.groups.added(replica, new, self.groups.run_start(run[0], parent))

    def remove(self, replica: str, hashes: Iterable[BlockHash]) -> None:
        blocks = self._blocks.get(replica)
        if blocks is None:
            return
        gone: list[BlockHash] = []
        for h in hashes:
            if h in blocks:
                blocks.discard(h)
                gone.append(h)
        self.groups.removed(replica, gone)
        for h in gone:
            self._discard_holder(h, replica)

    def clear(self, replica: str) -> None:
        self.reset(replica, ())

    def add_pending(self, replica: str, hashes: Sequence[BlockHash], ttl_s: float) -> None:
        """`replica` is about to compute these blocks: count them as its own for `ttl_s`."""
        now = self._clock()
        self._expire(now)
        expiry = now + ttl_s
        for h in hashes:
            self._pending.setdefault(h, {})[replica] = expiry
            self._expiries.append((expiry, h, replica))

    # ---- lookup ----------------------------------------------------------------------------------

    def match(self, hashes: Sequence[BlockHash], replicas: Iterable[str]) -> dict[str, int]:
        """For each of `replicas`: how many leading blocks of `hashes` it holds (or will soon).

        Walks the request's blocks once, narrowing the set of replicas that hold every block so
        far; stops as soon as none does.
        """
        matched = dict.fromkeys(replicas, 0)
        alive = set(matched)
        now = self._clock()
        for i, h in enumerate(hashes):
            alive &= self._holders_of(h, now)
            if not alive:
                break
            for replica in alive:
                matched[replica] = i + 1
        return matched

    def _holders_of(self, h: BlockHash, now: float) -> set[str]:
        holders = self._holders.get(h, set())
        pending = self._pending.get(h)
        if not pending:
            return holders
        return holders | {r for r, expiry in pending.items() if expiry > now}

    def _discard_holder(self, h: BlockHash, replica: str) -> None:
        holders = self._holders.get(h)
        if holders is not None:
            holders.discard(replica)
            if not holders:
                del self._holders[h]
                self.groups.unheld(h)

    def _expire(self, now: float) -> None:
        while self._expiries and self._expiries[0][0] <= now:
            expiry, h, replica = self._expiries.popleft()
            pending = self._pending.get(h)
            if pending is not None and pending.get(replica) == expiry:
                del pending[replica]
                if not pending:
                    del self._pending[h]
