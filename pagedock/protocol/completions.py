"""POST /v1/completions: the request, and the response (also the shape of each streamed chunk)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pagedock.limits import MAX_REQUEST_SEQUENCES
from pagedock.protocol.openai import (
    MAX_INT32,
    MAX_N,
    MAX_TOP_LOGPROBS,
    OpenAIModel,
    PromptLogprobsField,
    SamplingFields,
    UsageInfo,
    now_s,
    random_id,
)
from pagedock.protocol.prompt_input import PromptInput, num_prompts


class CompletionRequest(SamplingFields):
    prompt: PromptInput
    # 0 only with echo: the answer is the prompt alone (with its logprobs, when asked).
    max_tokens: Annotated[int, Field(ge=0, le=MAX_INT32)] | None = 16
    echo: bool = False
    logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    best_of: Annotated[int, Field(ge=1, le=MAX_N)] | None = None
    suffix: str | None = None

    @model_validator(mode="after")
    def _bounded_work(self) -> CompletionRequest:
        """Every prompt runs n times, each an engine request: bounded before any is queued."""
        sequences = num_prompts(self.prompt) * self.n
        if sequences > MAX_REQUEST_SEQUENCES:
            raise ValueError(
                f"{num_prompts(self.prompt)} prompts x n={self.n} would generate {sequences} "
                f"sequences; one request may generate at most {MAX_REQUEST_SEQUENCES}"
            )
        return self

    @property
    def echo_without_generation(self) -> bool:
        """echo with max_tokens 0: one token is generated (as vLLM does) and left out."""
        return self.echo and self.max_tokens == 0

    def unsupported_field(self) -> str | None:
        if self.suffix:
            return "suffix"
        if self.best_of is not None and self.best_of != self.n:
            return "best_of"
        return super().unsupported_field()


class CompletionLogprobs(OpenAIModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(OpenAIModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    prompt_logprobs: PromptLogprobsField | None = None


class CompletionResponse(OpenAIModel):
    """Also the shape of each streamed chunk (`choices` then carry deltas)."""

    id: str = Field(default_factory=lambda: random_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now_s)
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    prompt_token_ids: list[int] | None = None
