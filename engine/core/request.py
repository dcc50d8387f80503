"""A request's state as the scheduler sees it: token ids, progress, status."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from engine.core.scheduler_output import (
    EngineCoreOutput,
    LogprobsLists,
    SampledToken,
    ScheduledRequest,
)
from engine.inputs.engine_request import DEFAULT_TENANT, EngineRequest
from engine.inputs.pooling_params import PoolingParams
from engine.inputs.sampling_params import SamplingParams
from pagedock.kv.block_hash import BlockHash, hash_blocks

if TYPE_CHECKING:
    import torch

    from engine.spec_decode.draft_acceptance import DraftAcceptance

Block = TypeVar("Block")


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    # Everything after PREEMPTED is finished.
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_ERROR = enum.auto()

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED

    @property
    def finish_reason(self) -> str | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}


@dataclass
class RequestTiming:
    """One request's timestamps (time.monotonic()), the only timing record there is: the engine
    fills it as the request goes, the server's metrics and log line read it once it finished.

    Arrival is set when the engine accepts the request and first scheduling by the scheduler (the
    engine thread); tokens and the finish by the output path. The n completions of a request
    share one record.
    """

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    num_generated_tokens: int = 0
    grammar_compile: tuple[float, float] | None = None
    """When its structured-outputs constraint was waited for, before it was queued."""
    prefill_chunks: list[tuple[float, float, int]] = field(default_factory=list)
    """Each step that computed part of its prompt: (start, end, tokens); a preempted request's
    recomputation adds more (the request tracer's prefill_chunk spans)."""


class Request:
    """One sequence being generated.

    The one progress rule: the scheduler only ever closes the gap between `num_computed_tokens`
    (tokens whose KV is in the cache) and `num_tokens` (prompt + generated). Prefill, a prefill
    chunk, a decode step, a prefix-cache hit and a recompute after preemption are all that gap.
    """

    num_computed_prompt_logprobs: int = 0
    """prompt_logprobs: the positions whose logits gave prompt logprobs so far (prompt tokens
    1..n); kept through a preemption, so that a recompute neither repeats nor loses any."""
    prompt_logprobs: LogprobsLists | None
    """The prompt logprobs computed so far, held until they go out with the first token (then
    None); None from the start when not asked for."""
    pooling_params: PoolingParams | None = None
    """An embedding request's pooling, resolved (set from its EngineRequest): it computes its
    prompt, is pooled and finishes, sampling nothing; None: a generation request."""
    spec_token_ids: Sequence[int] = ()
    """Speculative decoding: the draft proposed after the last step (not part of its tokens until
    verified); empty without one (engine/core/speculation.py)."""
    draft_acceptance: DraftAcceptance | None = None
    """Speculative decoding: how its drafts have fared (None before the first)."""

    def __init__(
        self,
        *,
        request_id: str,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams,
        eos_token_ids: Sequence[int] = (),
        priority: int = 0,
        timing: RequestTiming | None = None,
        output_token_ids: Sequence[int] = (),
        lora_name: str | None = None,
        cache_salt: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        """`sampling_params.max_tokens` must be resolved (the InputProcessor does it). `timing`:
        a record shared with sibling completions (n > 1), carrying the arrival; None: arrived
        now. `output_token_ids`: tokens generated before, elsewhere (a continuation: see
        engine/inputs/continuation.py); they count as output for every rule that reads it.
        `lora_name`: the LoRA adapter it runs with (None: the base model); `cache_salt`: the
        salt its block hashes chain from (pagedock/kv/block_hash.py); `tenant`: who it belongs to
        (the fair queue's, engine/core/fair_queue.py)."""
        if sampling_params.max_tokens is None:
            raise ValueError("a Request's max_tokens must be resolved (InputProcessor.process)")
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        # A copy of the one resolved value, read on every step.
        self.max_tokens: int = sampling_params.max_tokens
        self.eos_token_ids = frozenset(eos_token_ids)
        self.stop_token_ids = frozenset(sampling_params.stop_token_ids)
        self.priority = priority
        self.timing = RequestTiming(time.monotonic()) if timing is None else timing
        self.status = RequestStatus.WAITING
        self.output_token_ids: list[int] = list(output_token_ids)
        self.all_token_ids: list[int] = [*prompt_token_ids, *output_token_ids]
        self.num_computed_tokens = 0
        # Prompt tokens found in the prefix cache when the request was first scheduled.
        self.num_cached_tokens = -1
        self.num_preemptions = 0
        self.block_hashes: list[BlockHash] = []
        self.stop_reason: int | str | None = None
        self.lora_name = lora_name
        self.cache_salt = cache_salt
        self.tenant = tenant
        # The id of its adapter's load (engine/lora/adapter_registry.py), set as the engine
        # queues it; None: the base model.
        self.lora_id: int | None = None
        # The LoRA slot pinned for it while it runs (engine/lora/slots.py); -1: none.
        self.lora_slot = -1
        self.prompt_logprobs = _prompt_logprobs_holder(sampling_params)

    @classmethod
    def from_engine_request(
        cls, request: EngineRequest, eos_token_ids: Sequence[int], timing: RequestTiming
    ) -> Request:
        """The scheduler's request for a validated EngineRequest (one completion of it)."""
        core = cls(
            request_id=request.request_id,
            prompt_token_ids=request.prompt_token_ids,
            sampling_params=request.sampling_params,
            eos_token_ids=eos_token_ids,
            priority=request.priority,
            timing=timing,
            output_token_ids=request.prior_output_token_ids,
            lora_name=None if request.lora_request is None else request.lora_request.name,
            cache_salt=request.cache_salt,
            tenant=request.tenant,
        )
        core.pooling_params = request.pooling_params
        return core

    @property
    def arrival_time(self) -> float:
        return self.timing.arrival_time

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    def to_scheduled(
        self, num_new: int, block_ids: list[int], drafts: list[int] | None = None
    ) -> ScheduledRequest:
        """What the model runner gets of it this step: `num_new` tokens from its computed ones
        (min_tokens still to come: its stop and, unless ignore_eos, EOS tokens banned), the last
        `len(drafts)` of them a draft to verify."""
        drafts = drafts or []
        start, num_new = self.num_computed_tokens, num_new - len(drafts)
        params = self.sampling_params
        banned: list[int] = []
        if self.num_output_tokens < params.min_tokens:
            banned = sorted(
                self.stop_token_ids | (set() if params.ignore_eos else self.eos_token_ids)
            )
        offset, num_rows = self._prompt_logprobs_rows(start, num_new)
        pooling_offset, num_pooling_rows = self._pooling_rows(start, num_new)
        return ScheduledRequest(
            request_id=self.request_id,
            new_token_ids=self.all_token_ids[start : start + num_new] + drafts,
            num_computed_tokens=start,
            block_ids=block_ids,
            do_sample=start + num_new == self.num_tokens and self.pooling_params is None,
            sampling_params=params,
            prompt_token_ids=self.prompt_token_ids,
            output_token_ids=self.output_token_ids,
            banned_token_ids=banned,
            lora_name=self.lora_name,
            lora_slot=self.lora_slot,
            prompt_logprobs_offset=offset,
            num_prompt_logprobs_rows=num_rows,
            pooling_params=self.pooling_params,
            pooling_offset=pooling_offset,
            num_pooling_rows=num_pooling_rows,
            draft_token_ids=drafts,
        )

    def _prompt_logprobs_rows(self, start: int, num_new: int) -> tuple[int, int]:
        """(offset in the chunk, count) of the rows whose logits give prompt logprobs still to
        compute: positions from `num_computed_prompt_logprobs` up to the one before the last
        prompt token (the last one's logits predict the first output token, not a prompt one)."""
        if self.prompt_logprobs is None:
            return 0, 0
        first = max(start, self.num_computed_prompt_logprobs)
        end = min(start + num_new, self.num_prompt_tokens - 1)
        return first - start, max(end - first, 0)

    def _pooling_rows(self, start: int, num_new: int) -> tuple[int, int]:
        """(offset in the chunk, count) of the rows whose final hidden states its pooling reads
        (engine/worker/pooler.py sums them across chunks); (0, 0) for a generation request."""
        if self.pooling_params is None:
            return 0, 0
        first, end = self.pooling_params.pooled_positions(self.num_prompt_tokens)
        first, end = max(first, start), min(end, start + num_new)
        return (first - start, end - first) if end > first else (0, 0)

    def limit_prefix_hit(self, blocks: list[Block], block_size: int) -> tuple[list[Block], int]:
        """The leading cached `blocks` it may take, and their tokens: all of them, except for an
        embedding request, which must compute every position its pooling reads (MEAN and CLS:
        from the first; LAST: the last, never a hit anyway). Its own blocks are cached as any
        request's, for later requests to share."""
        if self.pooling_params is not None:
            first, _ = self.pooling_params.pooled_positions(self.num_prompt_tokens)
            blocks = blocks[: first // block_size]
        return blocks, len(blocks) * block_size

    def step_output(self, token_ids: list[int], sampled: SampledToken) -> EngineCoreOutput:
        """Its output for a step that appended `token_ids` (the last one `sampled`)."""
        return EngineCoreOutput(
            self.request_id,
            token_ids,
            finish_reason=self.status.finish_reason,
            stop_reason=self.stop_reason,
            logprobs=[sampled] if self.sampling_params.logprobs is not None else [],
            num_cached_tokens=self.num_cached_tokens,
            prompt_logprobs=self.take_prompt_logprobs(),
        )

    def pooled(self, embedding: torch.Tensor | None) -> tuple[RequestStatus, EngineCoreOutput]:
        """An embedding request whose prompt is computed: the status it finishes with and its
        output (an error when the runner pooled nothing for it, which is a bug)."""
        if embedding is None:
            error = "internal error: the prompt was computed but not pooled"
            return RequestStatus.FINISHED_ERROR, EngineCoreOutput(
                self.request_id, [], "error", error=error
            )
        output = EngineCoreOutput(
            self.request_id,
            [],
            "stop",
            num_cached_tokens=self.num_cached_tokens,
            pooling_output=embedding,
        )
        return RequestStatus.FINISHED_STOPPED, output

    def add_prompt_logprobs(self, rows: LogprobsLists) -> None:
        """The prompt logprobs one step computed (the rows after those already held)."""
        assert self.prompt_logprobs is not None, "prompt logprobs it did not ask for"
        self.prompt_logprobs.extend(rows)
        self.num_computed_prompt_logprobs = rows.first_token_index - 1 + len(rows)

    def take_prompt_logprobs(self) -> LogprobsLists | None:
        """Every prompt token's logprobs, once (with the first token); None after, or when not
        asked for."""
        rows, self.prompt_logprobs = self.prompt_logprobs, None
        return rows

    def update_block_hashes(self, block_size: int, root: BlockHash) -> None:
        """Extend the chain of full-block hashes to cover every full block of all_token_ids."""
        start = len(self.block_hashes)
        if (start + 1) * block_size > self.num_tokens:
            return
        parent = self.block_hashes[-1] if self.block_hashes else root
        self.block_hashes.extend(
            hash_blocks(self.all_token_ids, block_size, root, parent=parent, start_block=start)
        )

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens})"
        )


def _prompt_logprobs_holder(params: SamplingParams) -> LogprobsLists | None:
    """Where a request asking for prompt logprobs collects them (empty), else None."""
    return None if params.prompt_logprobs is None else LogprobsLists(1, [], [], [])
