"""Turns the scheduler's per-step token outputs into RequestOutputs: detokenizes incrementally,
applies stop strings, and keeps each request's cumulative text."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.scheduler_output import EngineCoreOutput, SampledToken
from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.text.detokenizer import IncrementalDetokenizer
    from engine.text.tokenizer import Tokenizer


@dataclass
class RequestState:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    detokenizer: IncrementalDetokenizer | None
    metrics: RequestMetrics
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[SampledToken] = field(default_factory=list)


@dataclass
class ProcessedOutputs:
    outputs: list[RequestOutput]
    # Requests a stop string ended: the engine must finish them in the scheduler.
    stopped_by_string: list[str]


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer
        self.states: dict[str, RequestState] = {}

    def add_request(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
    ) -> None:
        detok = None
        if self.tokenizer is not None:
            from engine.text.detokenizer import IncrementalDetokenizer

            detok = IncrementalDetokenizer(
                self.tokenizer,
                prompt_token_ids,
                params.skip_special_tokens,
                params.stop,
                params.include_stop_str_in_output,
                params.min_tokens,
            )
        self.states[request_id] = RequestState(
            request_id, prompt, prompt_token_ids, params, detok, RequestMetrics(arrival_time)
        )

    def abort(self, request_id: str) -> RequestOutput | None:
        state = self.states.pop(request_id, None)
        if state is None:
            return None
        return self._make_output(state, [], "", "abort", None, finished=True)

    def process(self, core_outputs: list[EngineCoreOutput]) -> ProcessedOutputs:
        outputs, stopped = [], []
        now = time.monotonic()
        for core in core_outputs:
            state = self.states.get(core.request_id)
            if state is None:
                continue
            if state.metrics.first_token_time is None and core.new_token_ids:
                state.metrics.first_token_time = now
            state.metrics.num_cached_tokens = core.num_cached_tokens
            finish_reason, stop_reason = core.finish_reason, core.stop_reason
            state.token_ids.extend(core.new_token_ids)
            state.logprobs.extend(core.logprobs)
            new_text = ""
            if state.detokenizer is not None:
                new_text, stop_str = state.detokenizer.update(
                    core.new_token_ids, finished=finish_reason is not None
                )
                if stop_str is not None and finish_reason is None:
                    finish_reason, stop_reason = "stop", stop_str
                    stopped.append(core.request_id)
                state.text += new_text
            finished = finish_reason is not None
            if finished:
                state.metrics.finished_time = now
                del self.states[core.request_id]
            outputs.append(
                self._make_output(
                    state,
                    core.new_token_ids,
                    new_text,
                    finish_reason,
                    stop_reason,
                    finished,
                    error=core.error,
                )
            )
        return ProcessedOutputs(outputs, stopped)

    def _make_output(
        self,
        state: RequestState,
        new_token_ids: list[int],
        new_text: str,
        finish_reason: str | None,
        stop_reason: int | str | None,
        finished: bool,
        error: str | None = None,
    ) -> RequestOutput:
        completion = CompletionOutput(
            index=0,
            text=state.text,
            token_ids=list(state.token_ids),
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            logprobs=list(state.logprobs) if state.params.logprobs is not None else None,
            new_text=new_text,
            new_token_ids=list(new_token_ids),
        )
        return RequestOutput(
            state.request_id,
            state.prompt,
            state.prompt_token_ids,
            [completion],
            finished,
            state.metrics,
            error,
        )
