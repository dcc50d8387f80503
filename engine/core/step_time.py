"""How much prefill a step with running decodes takes (Sarathi-Serve's stall-free batching).

By default (EngineConfig.max_step_ms unset) a fixed share of the token budget: a fifth of
max_num_batched_tokens beside the decodes. That holds the inter-token tail to about a fifth of
what a full-budget step costs, plus the decodes, on whatever CPU, where a target in milliseconds
suits one machine only (250 ms was a third of vLLM's tail on one machine and two fifths on a
faster one). (A quarter, measured online at concurrency 32 on pagedock alone, 3 interleaved
pairs: inter-token p99 ~22 % longer, time to first token no shorter.) A burst,
prompts awaiting their first token at least half as many as the decodes, takes the whole budget:
its last prompt waits for all of it, and its long steps delay few decodes.

With a target in milliseconds, the prefill that fits under it by what a step costs, learned from
the steps the engine runs:

A step is modelled as the decode-only step it would otherwise be plus a cost per prefill token.
The first is an average of recent steps that prefilled nothing, so it follows the running set's
size and context lengths as they change; the second an average over recent steps that prefilled
enough tokens to measure, net of that decode part. Exponential averages follow the machine: a
neighbour on the cores, the output thread's share of the GIL, a model that is slower than assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import EngineConfig

# Prefill pieces smaller than this say more about the step's fixed costs than about a token's.
MIN_MEASURED_PREFILL = 32
# The smallest prefill chunk a step target may cut a step's prefill to: smaller GEMMs lose their
# efficiency, and prompts must keep their pace where the decodes alone take longer than the
# target (a slow or crowded machine), else every time to first token would balloon.
MIN_PREFILL_CHUNK = 256
# The default's share of max_num_batched_tokens a step beside running decodes may prefill.
DEFAULT_PREFILL_SHARE = 0.2


def stretch(num_decodes: int, num_prompts: int) -> float:
    """A longer step delays each running decode once and brings each of the `num_prompts` still
    without a first token nearer to it, so while prompts outnumber decodes the step may grow by
    their ratio: a burst of new prompts is prefilled at full pace beside its first few decodes,
    and one new prompt among many decodes keeps to the step's usual size."""
    return max(1.0, num_prompts / max(num_decodes, 1))


def default_prefill_budget(token_budget: int, num_decodes: int, num_prompts: int) -> int:
    """The prefill tokens a step beside `num_decodes` running decodes takes when no target in
    milliseconds is set: the whole budget while prompts awaiting their first token are at least
    half as many as the decodes (a burst: its few decodes' long steps are few inter-token
    samples, and the burst's last prompt waits for the whole of it), else DEFAULT_PREFILL_SHARE
    of it, at least MIN_PREFILL_CHUNK. (Measured online, concurrency 32, with a quarter as the
    share: a burst rule of prompts >= decodes left the first burst's longest prompts to shared
    steps, TTFT p99 ~8 % longer.)"""
    if 2 * num_prompts >= num_decodes:
        return token_budget
    return max(int(token_budget * DEFAULT_PREFILL_SHARE), MIN_PREFILL_CHUNK)


@dataclass
class StepTimeModel:
    smoothing: float = 0.2
    """Weight of the newest step in each average."""
    decode_step_s: float | None = None
    """A step of the running decodes alone; None until one ran."""
    prefill_token_s: float | None = None
    """One more prefill token in a step; None until a step with enough prefill ran."""

    def observe(self, num_decode_tokens: int, num_prefill_tokens: int, seconds: float) -> None:
        if num_prefill_tokens == 0:
            if num_decode_tokens:
                self.decode_step_s = self._average(self.decode_step_s, seconds)
            return
        if num_prefill_tokens < MIN_MEASURED_PREFILL:
            return
        # A step without decodes charges its fixed costs to its tokens: a slight overestimate,
        # which errs towards shorter steps.
        decode_part = (self.decode_step_s or 0.0) if num_decode_tokens else 0.0
        per_token = max(seconds - decode_part, 0.0) / num_prefill_tokens
        self.prefill_token_s = self._average(self.prefill_token_s, per_token)

    def step_budget(
        self, config: EngineConfig, token_budget: int, num_decodes: int, num_prompts: int
    ) -> int:
        """A step's token budget: `token_budget` (max_num_batched_tokens), or with decodes
        running the decodes plus the prefill allowed beside them: a fifth of the budget by
        default (default_prefill_budget), or what fits under config.max_step_ms."""
        target_ms = config.max_step_ms
        if target_ms == 0 or not num_decodes or not config.enable_chunked_prefill:
            return token_budget  # (a whole prompt per step cannot be cut to a target)
        if target_ms is None:
            prefill = default_prefill_budget(token_budget, num_decodes, num_prompts)
        else:
            measured = self.prefill_budget(target_ms / 1000, num_decodes, num_prompts)
            prefill = token_budget if measured is None else measured
        return min(token_budget, num_decodes + prefill)

    def prefill_budget(self, target_s: float, num_decodes: int, num_prompts: int) -> int | None:
        """The prefill tokens a step beside `num_decodes` running decodes may take under an
        inter-token target of `target_s` (stretched while prompts outnumber decodes), never
        fewer than MIN_PREFILL_CHUNK; None while no prefill has been measured."""
        fits = self.prefill_tokens_within(target_s * stretch(num_decodes, num_prompts))
        return None if fits is None else max(fits, MIN_PREFILL_CHUNK)

    def prefill_tokens_within(self, step_s: float) -> int | None:
        """How many prefill tokens fit beside the running decodes in a step of `step_s`; None
        while no prefill has been measured (the caller then keeps its own budget)."""
        if not self.prefill_token_s:
            return None
        spare = step_s - (self.decode_step_s or 0.0)
        return max(int(spare / self.prefill_token_s + 1e-6), 0)  # (1e-6: float round-off)

    def _average(self, current: float | None, sample: float) -> float:
        if current is None:
            return sample
        return (1 - self.smoothing) * current + self.smoothing * sample
