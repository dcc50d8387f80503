"""PrefixGroups: the prefix each indexed block belongs to, and how many blocks of each prefix every
replica holds — the KV index's blocks grouped for people (the router's /dashboard).

A prefix is named by its *chain start*, the first block of its hash chain. A stored event's run
names its parent: its blocks join their parent's prefix, or start one when the parent is None (the
run begins at a prompt's first block). Requests that share their first block (a system prompt, a
conversation's earlier turns) share a group; a LoRA adapter's or a salted request's chains start
from another root, so their first blocks and their groups differ.

Blocks whose chain start the router never saw are one group, UNTRACED: a snapshot's (it lists
hashes without parents: the router started, or resynced after a gap, once they were cached), or a
run whose parent was untraced or no longer indexed. A block's group is fixed when it is first
indexed and kept while any replica holds it, so what each replica counts in is what it counts out.

Counts change with the blocks (constant work per block); a view costs O(groups) per replica.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

from pagedock.kv.block_hash import BlockHash

UNTRACED: BlockHash = b""
"""The group of blocks whose chain start is unknown; as a run's parent: the parent is unknown."""


@dataclass(frozen=True)
class GroupCounts:
    """One replica's blocks by prefix, the largest groups first."""

    groups: list[tuple[BlockHash, int]]
    """(chain start, blocks), at most the view's limit, UNTRACED excluded."""
    untraced_blocks: int
    other_groups: int
    """Groups beyond the limit."""
    other_blocks: int
    """Their blocks."""


class PrefixGroups:
    def __init__(self) -> None:
        self._starts: dict[BlockHash, BlockHash] = {}
        """Each indexed block's chain start (UNTRACED when unknown), while any replica holds it."""
        self._counts: dict[str, dict[BlockHash, int]] = {}
        """Per replica: blocks per chain start."""

    def run_start(self, first: BlockHash, parent: BlockHash | None) -> BlockHash:
        """The chain start of a run of blocks beginning with `first` after `parent` (None: the
        run begins its chain; UNTRACED: its parent is unknown)."""
        if parent is None:
            return first
        return self._starts.get(parent, UNTRACED)

    def added(self, replica: str, hashes: Iterable[BlockHash], start: BlockHash) -> None:
        """`hashes` are new on `replica`; those not indexed yet belong to `start`."""
        counts = self._counts.setdefault(replica, {})
        starts = self._starts
        num_in_start = 0  # the common case, counted in one go: a run's blocks share a start
        for h in hashes:
            known = starts.setdefault(h, start)
            if known is start:
                num_in_start += 1
            else:
                counts[known] = counts.get(known, 0) + 1
        if num_in_start:
            counts[start] = counts.get(start, 0) + num_in_start

    def removed(self, replica: str, hashes: Iterable[BlockHash]) -> None:
        """`hashes` left `replica` (call before `unheld`, which forgets their groups)."""
        counts = self._counts.get(replica)
        if counts is None:
            return
        starts = self._starts
        for h in hashes:
            start = starts.get(h, UNTRACED)
            left = counts.get(start, 0) - 1
            if left > 0:
                counts[start] = left
            else:
                counts.pop(start, None)

    def forget_replica(self, replica: str) -> None:
        """Every block left `replica` at once."""
        self._counts.pop(replica, None)

    def unheld(self, h: BlockHash) -> None:
        """No replica holds `h` any more: its group is forgotten."""
        self._starts.pop(h, None)

    def start_of(self, h: BlockHash) -> BlockHash | None:
        """The chain start of an indexed block; None when no replica holds it."""
        return self._starts.get(h)

    def counts(self, replica: str, limit: int) -> GroupCounts:
        """`replica`'s largest `limit` groups and what is left over, in O(groups)."""
        counts = self._counts.get(replica, {})
        untraced = counts.get(UNTRACED, 0)
        top = heapq.nlargest(limit + 1, counts.items(), key=itemgetter(1))
        top = [item for item in top if item[0] != UNTRACED][:limit]
        num_traced = len(counts) - (1 if untraced else 0)
        shown = sum(n for _, n in top)
        total = sum(counts.values())
        return GroupCounts(top, untraced, num_traced - len(top), total - untraced - shown)
