"""The output path: the engine's per-step token outputs (EngineCoreOutput) become RequestOutputs.

Per completion it detokenizes incrementally and applies stop strings; per request it merges the
n completions under the request's id, shapes each output by its kind (see
engine/runtime/outputs.py) and fills the request's timing record. It never touches the scheduler,
so it runs wherever its caller does: inline in `LLMEngine.step()` (offline), on the output worker
thread behind AsyncEngine (server). Either way one thread owns an OutputProcessor.

A stop string ends a completion here first: its engine request id is reported in
`stopped_by_string`, and the caller asks the engine to finish it. Until the engine has, it may
still produce tokens for it; they arrive after the completion's state is gone and are dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.request import RequestTiming
from engine.core.scheduler_output import EngineCoreOutput, SampledToken
from engine.inputs.engine_request import DEFAULT_TENANT, EngineRequest
from engine.inputs.sampling_params import RequestOutputKind, SamplingParams
from engine.runtime.logprobs import PromptLogprobs, prompt_logprobs_of
from engine.runtime.outputs import (
    CompletionOutput,
    FinishedRequestStats,
    IterationStats,
    RequestOutput,
)
from pagedock.text.detokenizer import IncrementalDetokenizer, SupportsDecode

if TYPE_CHECKING:
    import torch

# Finishes that end a completion without text: nothing held back is released.
_NO_TEXT_FINISHES = ("abort", "error")


@dataclass
class NewRequest:
    """A request the engine accepted, as the output path must know it before its first output."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    timing: RequestTiming
    child_ids: list[str]
    """The engine request id of each completion, by index ([request_id] when n == 1)."""
    prior_output_token_ids: list[int] = field(default_factory=list)
    """A continuation's tokens generated before (n == 1): its text state starts after them."""
    lora_name: str | None = None
    """The LoRA adapter it runs with (for the per-adapter metrics); None: the base model."""
    tenant: str = DEFAULT_TENANT
    priority: int = 0
    """Who it belongs to and the priority it runs at (for the per-tenant metrics)."""
    is_pooling: bool = False
    """An embedding request: no tokens, its prompt counted when it finishes."""

    @classmethod
    def of(cls, request: EngineRequest, timing: RequestTiming, child_ids: list[str]) -> NewRequest:
        """What the output path must know of a request the engine queued."""
        return cls(
            request_id=request.request_id,
            prompt=request.prompt,
            prompt_token_ids=request.prompt_token_ids,
            params=request.sampling_params,
            timing=timing,
            child_ids=child_ids,
            prior_output_token_ids=request.prior_output_token_ids,
            lora_name=None if request.lora_request is None else request.lora_request.name,
            tenant=request.tenant,
            priority=request.priority,
            is_pooling=request.pooling_params is not None,
        )


@dataclass
class ProcessedOutputs:
    outputs: list[RequestOutput]
    # Engine request ids a stop string ended: the engine must finish them in the scheduler.
    stopped_by_string: list[str]
    stats: IterationStats


class _Completion:
    """One completion: its detokenizer and, unless outputs are deltas, everything it generated
    (appended once per step; joined or copied only when an output needs it whole)."""

    def __init__(
        self,
        index: int,
        detokenizer: IncrementalDetokenizer | None,
        accumulate: bool,
        with_logprobs: bool,
    ) -> None:
        self.index = index
        self.detokenizer = detokenizer
        self.accumulate = accumulate
        self.with_logprobs = with_logprobs
        self.token_ids: list[int] = []
        self.text_parts: list[str] = []
        self.logprobs: list[SampledToken] = []
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    def update(self, core: EngineCoreOutput) -> tuple[CompletionOutput, bool]:
        """Take one step's output; returns what it added, and whether a stop string ended the
        completion while the engine still runs it."""
        text, stop_string = "", None
        if self.detokenizer is not None and core.finish_reason not in _NO_TEXT_FINISHES:
            text, stop_string = self.detokenizer.update(
                core.new_token_ids, finished=core.finish_reason is not None
            )
        if stop_string is not None:
            # NOTE: even when the engine ended it too (length): the text stops at the string.
            self.finish_reason, self.stop_reason = "stop", stop_string
        else:
            self.finish_reason, self.stop_reason = core.finish_reason, core.stop_reason
        logprobs = core.logprobs if self.with_logprobs else None
        if self.accumulate:
            self.token_ids.extend(core.new_token_ids)
            self.text_parts.append(text)
            self.logprobs.extend(logprobs or ())
        delta = CompletionOutput(
            self.index, text, core.new_token_ids, self.finish_reason, self.stop_reason, logprobs
        )
        return delta, stop_string is not None and core.finish_reason is None

    def snapshot(self) -> CompletionOutput:
        """Everything so far, as copies (CUMULATIVE)."""
        self.text_parts = ["".join(self.text_parts)]
        return CompletionOutput(
            self.index,
            self.text_parts[0],
            list(self.token_ids),
            self.finish_reason,
            self.stop_reason,
            list(self.logprobs) if self.with_logprobs else None,
        )

    def final(self) -> CompletionOutput:
        """Everything, handing the lists over: the completion is done with them (FINAL_ONLY)."""
        return CompletionOutput(
            self.index,
            "".join(self.text_parts),
            self.token_ids,
            self.finish_reason,
            self.stop_reason,
            self.logprobs if self.with_logprobs else None,
        )


class _RequestState:
    """One request as its caller sees it: n completions under one id, one timing record."""

    def __init__(self, new: NewRequest, completions: list[_Completion]) -> None:
        self.new = new
        self.kind = new.params.output_kind
        self.completions = completions
        self.num_unfinished = len(completions)
        self.num_cached_tokens = 0
        self.error: str | None = None
        # Once computed (with the first token); a DELTA request's go out once, then are dropped.
        self.prompt_logprobs: PromptLogprobs | None = None
        self.pooling_output: torch.Tensor | None = None

    @property
    def finished(self) -> bool:
        return self.num_unfinished == 0

    def make_output(self, deltas: list[CompletionOutput]) -> RequestOutput | None:
        if self.kind is RequestOutputKind.DELTA:
            outputs = sorted(deltas, key=lambda c: c.index) if len(deltas) > 1 else deltas
        elif self.kind is RequestOutputKind.CUMULATIVE:
            outputs = [c.snapshot() for c in self.completions]
        elif self.finished:
            outputs = [c.final() for c in self.completions]
        else:
            return None
        new = self.new
        prompt_logprobs = self.prompt_logprobs
        if self.kind is RequestOutputKind.DELTA:
            self.prompt_logprobs = None
        return RequestOutput(
            new.request_id,
            new.prompt,
            new.prompt_token_ids,
            outputs,
            self.finished,
            self.num_cached_tokens,
            self.error,
            prompt_logprobs,
            self.pooling_output,
        )


class OutputProcessor:
    def __init__(self, tokenizer: SupportsDecode | None) -> None:
        self.tokenizer = tokenizer
        self._requests: dict[str, _RequestState] = {}
        # By engine request id: the completion and the request it belongs to.
        self._completions: dict[str, tuple[_RequestState, _Completion]] = {}

    @property
    def num_unfinished_requests(self) -> int:
        return len(self._requests)

    def add_request(self, new: NewRequest) -> None:
        params = new.params
        accumulate = params.output_kind is not RequestOutputKind.DELTA
        completions = [
            _Completion(i, self._detokenizer(new), accumulate, params.logprobs is not None)
            for i in range(len(new.child_ids))
        ]
        if new.prior_output_token_ids and completions[0].detokenizer is not None:
            # The text already sent for them: stop strings and held-back text go on from there.
            completions[0].detokenizer.replay(new.prior_output_token_ids)
        state = _RequestState(new, completions)
        self._requests[new.request_id] = state
        for child_id, completion in zip(new.child_ids, completions, strict=True):
            self._completions[child_id] = (state, completion)

    def process(
        self, core_outputs: list[EngineCoreOutput], now: float | None = None
    ) -> ProcessedOutputs:
        """One step's core outputs; `now`: when the step ended (the timing records' clock)."""
        now = time.monotonic() if now is None else now
        stepped: dict[str, list[CompletionOutput]] = {}
        stopped: list[str] = []
        for core in core_outputs:
            entry = self._completions.get(core.request_id)
            if entry is None:
                continue  # ended already (a stop string, an abort): late tokens are dropped
            state, completion = entry
            delta, by_stop_string = completion.update(core)
            if by_stop_string:
                stopped.append(core.request_id)
            if completion.finish_reason is not None:
                del self._completions[core.request_id]
                state.num_unfinished -= 1
            if completion.index == 0 and core.new_token_ids:
                state.num_cached_tokens = core.num_cached_tokens
            state.error = state.error or core.error
            if core.prompt_logprobs is not None:
                state.prompt_logprobs = prompt_logprobs_of(core.prompt_logprobs, self.tokenizer)
            if core.pooling_output is not None:
                state.pooling_output = core.pooling_output
                state.num_cached_tokens = core.num_cached_tokens
            stepped.setdefault(state.new.request_id, []).append(delta)
        stats = IterationStats()
        outputs = []
        for request_id, deltas in stepped.items():
            state = self._requests[request_id]
            self._record_timing(state, deltas, now, stats)
            output = state.make_output(deltas)
            if output is not None:
                outputs.append(output)
        return ProcessedOutputs(outputs, stopped, stats)

    def _record_timing(
        self,
        state: _RequestState,
        deltas: list[CompletionOutput],
        now: float,
        stats: IterationStats,
    ) -> None:
        timing = state.new.timing
        num_new = sum(len(d.token_ids) for d in deltas)
        if num_new:
            if timing.last_token_time is None:
                timing.first_token_time = now
                stats.num_prompt_tokens += len(state.new.prompt_token_ids)
                stats.time_to_first_tokens_s.append(now - timing.arrival_time)
            else:
                stats.inter_token_latencies_s.append(now - timing.last_token_time)
            timing.last_token_time = now
            timing.num_generated_tokens += num_new
            stats.num_generation_tokens += num_new
        if state.finished:
            timing.finished_time = now
            if state.new.is_pooling:  # its prompt is all it ran (it has no first token)
                stats.num_prompt_tokens += len(state.new.prompt_token_ids)
            del self._requests[state.new.request_id]
            reasons = [c.finish_reason or "abort" for c in state.completions]
            new = state.new
            stats.finished.append(
                FinishedRequestStats(
                    new.request_id,
                    new.prompt,
                    len(new.prompt_token_ids),
                    reasons,
                    timing,
                    new.lora_name,
                    new.tenant,
                    new.priority,
                )
            )

    def _detokenizer(self, new: NewRequest) -> IncrementalDetokenizer | None:
        if self.tokenizer is None:
            return None
        params = new.params
        return IncrementalDetokenizer(
            self.tokenizer,
            new.prompt_token_ids,
            params.skip_special_tokens,
            params.stop,
            params.include_stop_str_in_output,
            params.min_tokens,
        )
