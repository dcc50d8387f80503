"""What the engine hands back for a request, and what the output path measured on the way.

A CompletionOutput's `text`, `token_ids` and `logprobs` mean what the request's
`SamplingParams.output_kind` says:

    CUMULATIVE   everything generated so far (a fresh copy in every output)
    DELTA        only what this step added: a request's outputs concatenate, in order, to the
                 whole completion; each new token, text piece and logprob is sent exactly once
    FINAL_ONLY   one output per request, once it finished, with everything

`finish_reason` / `stop_reason` are set on the output that ends a completion. With n > 1, a
DELTA output lists the completions that advanced this step (by `index`); the other kinds list
all n.

An embedding request has one output, when it finishes: its `pooling_output` is the embedding and
its one completion is empty. `LLM.embed` hands it out as vLLM's EmbeddingRequestOutput.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.request import RequestTiming
from engine.core.scheduler_output import SampledToken
from engine.inputs.engine_request import DEFAULT_TENANT
from engine.runtime.logprobs import PromptLogprobs

if TYPE_CHECKING:
    import torch


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    # None unless the request asked for logprobs.
    logprobs: list[SampledToken] | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    # Prompt tokens the first completion found in the prefix cache.
    num_cached_tokens: int = 0
    error: str | None = None
    # When SamplingParams.prompt_logprobs asked: None for the first prompt token, then each
    # one's {token id: Logprob} (engine/runtime/logprobs.py). A DELTA request gets them in its
    # first output, the other kinds in every output.
    prompt_logprobs: PromptLogprobs | None = None
    # An embedding request's embedding (float32, on the CPU), in its finished output.
    pooling_output: torch.Tensor | None = None

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


@dataclass
class EmbeddingOutput:
    """vLLM's: one embedding."""

    embedding: list[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class EmbeddingRequestOutput:
    """vLLM's: what `LLM.embed` returns per prompt."""

    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: list[int]
    finished: bool = True

    @classmethod
    def of(cls, output: RequestOutput) -> EmbeddingRequestOutput:
        """An embedding request's finished output; RuntimeError when it has no embedding."""
        if output.pooling_output is None:
            why = output.error or output.finish_reason
            raise RuntimeError(f"request {output.request_id} ended without an embedding: {why}")
        embedding = output.pooling_output.tolist()
        return cls(output.request_id, EmbeddingOutput(embedding), output.prompt_token_ids)


@dataclass
class FinishedRequestStats:
    """A request that ended this step: what its log line and the end-of-request metrics need."""

    request_id: str
    prompt: str | None
    num_prompt_tokens: int
    finish_reasons: list[str]
    """One per completion, by index."""
    timing: RequestTiming
    """Complete: nothing writes it any more."""
    lora_name: str | None = None
    """The LoRA adapter it ran with; None: the base model."""
    tenant: str = DEFAULT_TENANT
    priority: int = 0
    """Who it belonged to and the priority it ran at (the per-tenant metrics' labels)."""


@dataclass
class IterationStats:
    """What one step's outputs add to the request metrics (vLLM's name). Plain values, so the
    server may read them on another thread while the output path goes on."""

    num_generation_tokens: int = 0
    # Prompt tokens of the requests that got their first token this step.
    num_prompt_tokens: int = 0
    time_to_first_tokens_s: list[float] = field(default_factory=list)
    inter_token_latencies_s: list[float] = field(default_factory=list)
    finished: list[FinishedRequestStats] = field(default_factory=list)
