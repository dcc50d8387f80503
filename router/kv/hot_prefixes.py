"""HotPrefixes: the prompt prefixes the router saw most recently and most often, as token ids, so
a new replica can be sent them before it takes its share (warm start).

Each request's prompt is recorded at block-aligned prefix lengths of 1, 2, 4, 8, ... full blocks
(up to `max_prefix_tokens`): requests that share a tenant's long system prompt but differ after
it add to the same keys, so the shared part rises to the top. Scores decay with a half-life, the
set holds at most `max_entries` prefixes (the lowest score goes), and `hottest` returns the
prefixes worth the most cached tokens (score x length), none of which is a prefix of another
chosen one. A salted request's prefixes are kept under its `cache_salt` (its tenant's, when the
router salts by tenant): warmed with it, they land on the chain that tenant's requests look up.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

HALF_LIFE_S = 300.0


@dataclass
class HotPrefix:
    token_ids: tuple[int, ...]
    score: float
    at: float
    cache_salt: str | None = None
    """The salt the prefix was sent with (None: unsalted), and is to be warmed with."""

    def current(self, now: float) -> float:
        return self.score * math.pow(0.5, max(0.0, now - self.at) / HALF_LIFE_S)


class HotPrefixes:
    def __init__(self, max_entries: int, block_size: int, max_prefix_tokens: int = 4096) -> None:
        self.max_entries = max_entries
        self.block_size = block_size
        self.max_prefix_tokens = max_prefix_tokens
        self._entries: dict[tuple[str | None, tuple[int, ...]], HotPrefix] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def record(
        self, token_ids: list[int], now: float | None = None, cache_salt: str | None = None
    ) -> None:
        if self.max_entries == 0:
            return
        now = time.monotonic() if now is None else now
        num_blocks = min(len(token_ids), self.max_prefix_tokens) // self.block_size
        blocks = 1
        while blocks <= num_blocks:
            self._add(tuple(token_ids[: blocks * self.block_size]), cache_salt, now)
            blocks *= 2
        self._evict(now)

    def hottest(self, count: int, now: float | None = None) -> list[HotPrefix]:
        """Up to `count` prefixes, the most cached tokens first; none a prefix of another of
        the same salt."""
        now = time.monotonic() if now is None else now
        ranked = sorted(
            self._entries.values(), key=lambda e: e.current(now) * len(e.token_ids), reverse=True
        )
        chosen: list[HotPrefix] = []
        for entry in ranked:
            if len(chosen) == count:
                break
            ids = entry.token_ids
            if any(
                c.cache_salt == entry.cache_salt
                and (c.token_ids[: len(ids)] == ids or ids[: len(c.token_ids)] == c.token_ids)
                for c in chosen
            ):
                continue  # covered by (or covering) one already chosen: warm the longer once
            chosen.append(entry)
        return chosen

    def _add(self, ids: tuple[int, ...], cache_salt: str | None, now: float) -> None:
        key = (cache_salt, ids)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = HotPrefix(ids, 1.0, now, cache_salt)
        else:
            entry.score = entry.current(now) + 1.0
            entry.at = now

    def _evict(self, now: float) -> None:
        excess = len(self._entries) - self.max_entries
        if excess > 0:
            coldest = sorted(self._entries.values(), key=lambda e: e.current(now))[:excess]
            for entry in coldest:
                del self._entries[entry.cache_salt, entry.token_ids]
