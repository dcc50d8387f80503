"""What the engine hands back for a request: cumulative text and tokens, plus this step's delta."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.scheduler_output import SampledToken


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: list[SampledToken] | None = None
    # What this step added (for streaming).
    new_text: str = ""
    new_token_ids: list[int] = field(default_factory=list)


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_cached_tokens: int = 0


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics | None = None
    error: str | None = None

    # The single-completion shorthand offline users reach for: outs[0].text.
    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason
