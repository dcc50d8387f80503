"""Torch-free factories for the bookkeeping tests: requests, schedulers, fake model outputs."""

from __future__ import annotations

import itertools
from typing import Any

from engine.config import EngineConfig
from engine.core.request import Request, RequestTiming
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import (
    LogprobsLists,
    ModelRunnerOutput,
    SampledToken,
    ScheduledRequest,
    SchedulerOutput,
)
from engine.inputs.sampling_params import SamplingParams
from pagedock.kv.block_hash import root_hash

ROOT = root_hash("test-model")
EOS = 2
_ids = itertools.count()


def make_request(
    prompt: list[int] | int = 20,
    max_tokens: int = 8,
    request_id: str | None = None,
    priority: int = 0,
    arrival_time: float | None = None,
    tenant: str = "default",
    **params: Any,
) -> Request:
    """A request; `prompt` is token ids, or a length (distinct ids per request)."""
    rid = request_id or f"req-{next(_ids)}"
    if isinstance(prompt, int):
        base = 1000 + 100 * (hash(rid) % 1000)
        prompt = [base + i for i in range(prompt)]
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0, **params)
    return Request(
        request_id=rid,
        prompt_token_ids=prompt,
        sampling_params=sampling,
        eos_token_ids=(EOS,),
        priority=priority,
        timing=None if arrival_time is None else RequestTiming(arrival_time),
        tenant=tenant,
    )


def make_scheduler(num_blocks: int = 64, max_model_len: int = 512, **config: Any) -> Scheduler:
    cfg = EngineConfig(**config)
    return Scheduler(cfg, num_blocks, max_model_len, ROOT)


def fake_runner_output(output: SchedulerOutput, token_id: int = 7) -> ModelRunnerOutput:
    """What a model would return: one token for every request that samples this step, and
    `fake_prompt_logprobs` for those that compute prompt logprobs."""
    return ModelRunnerOutput(
        {s.request_id: SampledToken(token_id) for s in output.scheduled if s.do_sample},
        prompt_logprobs={
            s.request_id: fake_prompt_logprobs(s)
            for s in output.scheduled
            if s.num_prompt_logprobs_rows
        },
    )


def fake_prompt_logprobs(item: ScheduledRequest) -> LogprobsLists:
    """Rows that name what they are for: prompt token i gets logprob -i and rank i."""
    first = item.num_computed_tokens + item.prompt_logprobs_offset + 1
    indices = range(first, first + item.num_prompt_logprobs_rows)
    return LogprobsLists(
        first,
        [[item.prompt_token_ids[i]] for i in indices],
        [[-float(i)] for i in indices],
        list(indices),
    )


def run_to_completion(scheduler: Scheduler, max_steps: int = 10_000) -> list[SchedulerOutput]:
    steps = []
    while scheduler.has_unfinished_requests():
        output = scheduler.schedule()
        scheduler.update(output, fake_runner_output(output))
        steps.append(output)
        assert len(steps) < max_steps, "scheduler made no progress"
    return steps
