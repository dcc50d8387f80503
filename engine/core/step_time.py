"""What a step costs, learned from the steps the engine runs, so that the scheduler can size the
prefill chunks of a step with running decodes to keep it under the inter-token target
(EngineConfig.max_step_ms; Sarathi-Serve's stall-free batching).

A step is modelled as the decode-only step it would otherwise be plus a cost per prefill token.
The first is an average of recent steps that prefilled nothing, so it follows the running set's
size and context lengths as they change; the second an average over recent steps that prefilled
enough tokens to measure, net of that decode part. Exponential averages follow the machine: a
neighbour on the cores, the output thread's share of the GIL, a model that is slower than assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

# Prefill pieces smaller than this say more about the step's fixed costs than about a token's.
MIN_MEASURED_PREFILL = 32


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
