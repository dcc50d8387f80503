"""Each guided request's grammar state (an xgrammar matcher), on the engine thread.

    add_engine_request ──register──▶ matcher ──bitmask──▶ sampler masks the row
                                       ▲                         │
                                       └────── accept(token) ◀───┘   (same step, after sampling)
    finish / abort / stop string ──release──▶ gone

A matcher has consumed exactly the request's output tokens. Preemption by recompute keeps those
tokens (only their KV is recomputed), so the matcher stays as it is and the resumed request's
next mask continues the same grammar; nothing is rebuilt or rolled back.

NOTE: a mask is computed on the engine thread, and some constraints cost more with every token
(`(.|..|...){1,5000}`: 341 ms for the first mask on a 49k vocabulary, seconds a few tokens on,
against 0.006 ms for a typical JSON schema, benchmarks/results/request_costs.json; on a small
vocabulary it starts under 10 ms and grows). The fill can't be interrupted, so the budget is
enforced after it: rows are filled a grammar at a time, the first row alone, and a grammar whose
fill took longer than `max_mask_s` a row (ten times that for a batch of rows) fails its requests
with a 400 after that step: one row's stall, never the stream of ever longer steps that held
every other request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from pagedock.errors import InvalidRequestFailure


class StructuredOutputManager:
    def __init__(
        self,
        vocab_size: int,
        max_mask_s: float | None = None,
        on_too_costly: Callable[[Any, str], None] | None = None,
    ) -> None:
        """`max_mask_s`: the budget of one row's mask (None: unbounded); `on_too_costly` hears of
        each compiled grammar that went over it, with the reason (so it is refused from then on)."""
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        self.max_mask_s = max_mask_s
        self.on_too_costly = on_too_costly
        self._matchers: dict[str, Any] = {}
        self._grammars: dict[str, Any] = {}
        """Each request's compiled grammar: rows are filled a grammar at a time."""
        self._failures: dict[str, InvalidRequestFailure] = {}
        self._last_over_s = 0.0
        """A row's mask time in the last fill that went over the budget (for the message)."""
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
        self._grammars[request_id] = compiled

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
            self._grammars.pop(request_id, None)
            self._failures.pop(request_id, None)

    def release_unless(self, is_live: Callable[[str], bool]) -> None:
        """Drop the state of every request `is_live` no longer knows (a safety net behind the
        explicit releases: a state must never outlive its request)."""
        self.release([r for r in self._matchers if not is_live(r)])

    def is_guided(self, request_id: str) -> bool:
        return request_id in self._matchers

    def bitmask(self, request_ids: list[str]) -> tuple[torch.Tensor, list[int]] | None:
        """The step's packed token bitmask ([rows, ceil(vocab / 32)] int32, bit set = allowed)
        and the rows it constrains; None when no row is guided. Per grammar: one row filled
        alone, timed against the budget, then the others in one batched fill (xgrammar spreads
        it over threads), so a grammar over budget costs one row's fill, not n."""
        # A row that failed this step is sampled unconstrained, its token then dropped.
        rows = [
            i for i, r in enumerate(request_ids) if r in self._matchers and r not in self._failures
        ]
        if not rows:
            return None
        bitmask = self._xgr.allocate_token_bitmask(len(request_ids), self.vocab_size)
        by_grammar: dict[int, list[int]] = {}
        for i in rows:
            by_grammar.setdefault(id(self._grammars[request_ids[i]]), []).append(i)
        for group in by_grammar.values():
            for part in (group[:1], group[1:]):
                if part and not self._fill(bitmask, [request_ids[i] for i in part], part):
                    self._fail([request_ids[i] for i in group])
                    break
        self.num_mask_steps += 1
        rows = [i for i in rows if request_ids[i] not in self._failures]
        return (bitmask, rows) if rows else None

    def _fill(self, bitmask: torch.Tensor, request_ids: list[str], rows: list[int]) -> bool:
        """Fill `rows`' masks; False when that went over the budget."""
        matchers = [self._matchers[r] for r in request_ids]
        # CPU time of this thread (xgrammar fills inline: equal to wall time on a quiet machine),
        # so a thread the OS descheduled mid-fill on a loaded machine is not counted against
        # the constraint.
        started, started_cpu = time.perf_counter(), time.thread_time()
        self._batch.batch_fill_next_token_bitmask(matchers, bitmask, indices=rows)
        elapsed = time.thread_time() - started_cpu
        self.mask_time_s += time.perf_counter() - started
        if self.max_mask_s is None or elapsed <= self.max_mask_s * min(len(rows), 10):
            return True
        self._last_over_s = elapsed / len(rows)
        return False

    def take_failures(self) -> dict[str, InvalidRequestFailure]:
        """The requests whose constraint went over the budget this step, with the reason; the
        caller fails them (their sampled tokens are dropped)."""
        failures, self._failures = self._failures, {}
        return failures

    def _fail(self, request_ids: list[str]) -> None:
        assert self.max_mask_s is not None
        compiled = self._grammars[request_ids[0]]
        reason = InvalidRequestFailure(
            f"the structured-outputs constraint is too costly to evaluate: one token's mask took "
            f"{self._last_over_s * 1e3:.0f} ms (the limit is {self.max_mask_s * 1e3:.0f} ms, "
            f"--max-grammar-mask-ms); simplify it (nested or long bounded repetitions such as "
            f"`(a|aa){{1,5000}}` are the usual cause)",
            "structured_outputs",
        )
        for request_id in request_ids:
            self._failures[request_id] = reason
        if self.on_too_costly is not None:
            self.on_too_costly(compiled, reason)

    def rejection(self, request_id: str, token_id: int) -> str:
        """Why the request's grammar rejected `token_id`: the client's constraint when it allows
        no token at all here (a rule that dead-ends, `root ::= "x" a` with `a ::= a`), else an
        internal error (the sampler drew outside the mask)."""
        matcher = self._matchers[request_id]
        bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        if not matcher.is_completed() and not bool(bitmask.any()):
            return InvalidRequestFailure(
                "the structured-outputs constraint allows no token here: the grammar dead-ends "
                "(a rule defined only through itself?)",
                "structured_outputs",
            )
        return f"internal error: the grammar rejected sampled token {token_id}"

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
