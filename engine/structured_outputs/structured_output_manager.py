"""Each guided request's grammar state (an xgrammar matcher), on the engine thread.

    add_engine_request ──register──▶ matcher ──bitmask──▶ sampler masks the row
                                       ▲                         │
                                       └────── accept(token) ◀───┘   (same step, after sampling)
    finish / abort / stop string ──release──▶ gone

A matcher has consumed exactly the request's output tokens. Preemption by recompute keeps those
tokens (only their KV is recomputed), so the matcher stays as it is and the resumed request's
next mask continues the same grammar; nothing is rebuilt or rolled back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch


class StructuredOutputManager:
    def __init__(self, vocab_size: int) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        self._matchers: dict[str, Any] = {}
        self._batch = xgr.BatchGrammarMatcher()
        # Cumulative, for benchmarks: time spent filling bitmasks, and the steps that needed one.
        self.mask_time_s = 0.0
        self.num_mask_steps = 0

    @property
    def num_live(self) -> int:
        """Grammar states held: one per unfinished guided request (the gauge's value)."""
        return len(self._matchers)

    def register(self, request_id: str, compiled: Any, stop_token_ids: Iterable[int]) -> None:
        """Start a matcher for the request; generating one of `stop_token_ids` is how its output
        may end once the grammar is complete (and the only thing it may then generate)."""
        stop = sorted(stop_token_ids) or None  # None: the tokenizer's (xgrammar refuses [])
        self._matchers[request_id] = self._xgr.GrammarMatcher(compiled, override_stop_tokens=stop)

    def replay(self, request_id: str, token_ids: Sequence[int]) -> bool:
        """Advance a fresh matcher over output generated before (a continuation's); False when
        the grammar rejects it or is complete before its end."""
        matcher = self._matchers[request_id]
        for token_id in token_ids:
            if matcher.is_terminated() or not matcher.accept_token(token_id):
                return False
        return True

    def release(self, request_ids: Iterable[str]) -> None:
        for request_id in request_ids:
            self._matchers.pop(request_id, None)

    def release_unless(self, is_live: Callable[[str], bool]) -> None:
        """Drop the state of every request `is_live` no longer knows (a safety net behind the
        explicit releases: a state must never outlive its request)."""
        for request_id in [r for r in self._matchers if not is_live(r)]:
            del self._matchers[request_id]

    def is_guided(self, request_id: str) -> bool:
        return request_id in self._matchers

    def bitmask(self, request_ids: list[str]) -> tuple[torch.Tensor, list[int]] | None:
        """The step's packed token bitmask ([rows, ceil(vocab / 32)] int32, bit set = allowed)
        and the rows it constrains; None when no row is guided. One batched fill over all
        guided rows (xgrammar spreads it over threads)."""
        rows = [i for i, r in enumerate(request_ids) if r in self._matchers]
        if not rows:
            return None
        started = time.perf_counter()
        bitmask = self._xgr.allocate_token_bitmask(len(request_ids), self.vocab_size)
        matchers = [self._matchers[request_ids[i]] for i in rows]
        self._batch.batch_fill_next_token_bitmask(matchers, bitmask, indices=rows)
        self.mask_time_s += time.perf_counter() - started
        self.num_mask_steps += 1
        return bitmask, rows

    def accept(self, request_id: str, token_id: int) -> tuple[bool, bool]:
        """Advance the request's matcher by its sampled token: (accepted, grammar terminated).
        A request that is not guided accepts everything and never terminates."""
        matcher = self._matchers.get(request_id)
        if matcher is None:
            return True, False
        accepted = bool(matcher.accept_token(token_id))
        return accepted, bool(matcher.is_terminated())


def apply_grammar_bitmask(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]
) -> torch.Tensor:
    """A copy of `logits` with every token the bitmask disallows set to -inf on the guided
    `rows` (`bitmask` has a row per logits row; xgrammar's CPU kernel does the masking)."""
    import xgrammar as xgr

    masked = logits.clone()
    xgr.apply_token_bitmask_inplace(masked, bitmask, indices=rows)
    return masked


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[rows, vocab_size] bool, True = allowed: the packed bitmask spelled out (tests, and the
    reference for what the kernel does: bit j of word w is token 32 * w + j)."""
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()
