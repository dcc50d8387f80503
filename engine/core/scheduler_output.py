"""What crosses the scheduler / model-runner boundary: plain data, no manager internals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.inputs.pooling_params import PoolingParams
from engine.inputs.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch


@dataclass
class ScheduledRequest:
    """One request's share of a step: compute `new_token_ids` at positions from
    `num_computed_tokens` on, writing their KV into `block_ids`."""

    request_id: str
    new_token_ids: list[int]
    num_computed_tokens: int
    block_ids: list[int]
    # True when this step reaches the end of the request's tokens: sample its next token.
    do_sample: bool
    sampling_params: SamplingParams
    # Live views (not copies) for penalties; the runner only reads them.
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    # Token ids that may not be sampled this step (end-of-sequence before min_tokens).
    banned_token_ids: list[int] = field(default_factory=list)
    # The LoRA adapter the request runs with and the weight slot the scheduler pinned for it
    # (engine/lora/slots.py); None and -1 for the base model.
    lora_name: str | None = None
    lora_slot: int = -1
    # Prompt logprobs asked for and not computed yet: the chunk's rows from this offset on, this
    # many, each giving the log-probabilities of the prompt token after its position.
    prompt_logprobs_offset: int = 0
    num_prompt_logprobs_rows: int = 0
    # An embedding request's pooling (None: a generation request), and the chunk's rows whose
    # final hidden states it reads: from this offset on, this many.
    pooling_params: PoolingParams | None = None
    pooling_offset: int = 0
    num_pooling_rows: int = 0
    # Speculative decoding: the last len(draft_token_ids) of new_token_ids are a draft to verify
    # (their rows sample too); empty without one.
    draft_token_ids: list[int] = field(default_factory=list)

    @property
    def num_new_tokens(self) -> int:
        return len(self.new_token_ids)

    @property
    def is_decode(self) -> bool:
        """A one-token piece, or one token and its draft (one of the step-cost model's decodes)."""
        return len(self.new_token_ids) == 1 + len(self.draft_token_ids)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest]
    num_scheduled_tokens: int
    preempted_req_ids: list[str] = field(default_factory=list)
    # Requests finished since the previous step: the runner drops its state for them.
    finished_req_ids: set[str] = field(default_factory=set)
    # Of num_scheduled_tokens, those in one-token pieces (decodes; a draft's tokens, extra rows
    # of the same GEMMs as a prefill's, count as prefill): the step-cost model's input.
    num_decode_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass
class SampledToken:
    token_id: int
    # The sampled token's log-probability and the top alternatives, when logprobs were asked for.
    logprob: float | None = None
    top_logprobs: dict[int, float] | None = None
    # Structured outputs: this token completed the request's grammar, which allows nothing more.
    ends_grammar: bool = False


@dataclass
class LogprobsLists:
    """Prompt log-probabilities of consecutive prompt tokens (vLLM's name), one row per token:
    row i is for prompt token `first_token_index + i`, as predicted by the logits at the position
    before it. Each row lists that prompt token first, then the top alternatives, most likely
    first (the token may be among them too)."""

    first_token_index: int
    logprob_token_ids: list[list[int]]
    logprobs: list[list[float]]
    # The prompt token's rank in the vocabulary (1: the most likely), per row.
    selected_token_ranks: list[int]

    def __len__(self) -> int:
        return len(self.selected_token_ranks)

    def extend(self, more: LogprobsLists) -> None:
        """Append the rows that follow these (the next chunk of the same prompt)."""
        assert more.first_token_index == self.first_token_index + len(self), "rows out of order"
        self.logprob_token_ids.extend(more.logprob_token_ids)
        self.logprobs.extend(more.logprobs)
        self.selected_token_ranks.extend(more.selected_token_ranks)


@dataclass
class ModelRunnerOutput:
    """Sampled tokens by request id (only requests that sampled this step), per-request errors,
    the prompt logprobs the step computed (requests that asked for them), and the embeddings of
    the embedding requests whose prompt it finished."""

    sampled: dict[str, SampledToken]
    errors: dict[str, str] = field(default_factory=dict)
    prompt_logprobs: dict[str, LogprobsLists] = field(default_factory=dict)
    pooler_output: dict[str, torch.Tensor] = field(default_factory=dict)
    # Speculative decoding: of each verified draft, the tokens accepted (its leading ones); the
    # request's `sampled` token then follows them.
    num_accepted_draft_tokens: dict[str, int] = field(default_factory=dict)


@dataclass
class EngineCoreOutput:
    """What one step produced for one request."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: list[SampledToken] = field(default_factory=list)
    num_cached_tokens: int = 0
    error: str | None = None
    # With the first token of a request that asked: every prompt token's logprobs (from 1 on).
    prompt_logprobs: LogprobsLists | None = None
    # An embedding request's embedding (float32, on the CPU), with its finish.
    pooling_output: torch.Tensor | None = None
