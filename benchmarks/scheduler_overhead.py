"""Per-step bookkeeping cost without the model: schedule, batch inputs, sampling tensors, update."""

from __future__ import annotations

import time

import torch

from engine.config import EngineConfig
from engine.core.request import Request
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import ModelRunnerOutput, SampledToken
from engine.inputs.sampling_params import SamplingParams
from engine.sampling.sampling_batch import build_sampling_tensors
from engine.worker.input_batch import build_model_inputs, order_decodes_first
from pagedock.kv.block_hash import root_hash


def measure_scheduler_overhead(
    num_running: int = 256, prompt_len: int = 300, num_steps: int = 50
) -> dict[str, float]:
    """Milliseconds per decode step with num_running requests, by phase."""
    config = EngineConfig(max_num_seqs=num_running, max_num_batched_tokens=prompt_len * num_running)
    blocks_per_seq = (prompt_len + num_steps + 16) // 16 + 1
    scheduler = Scheduler(config, num_running * blocks_per_seq, 4096, root_hash("bench"))
    params = SamplingParams(max_tokens=10_000, temperature=0.0, ignore_eos=True)
    for i in range(num_running):
        prompt = [(i * 7919 + j) % 30000 + 100 for j in range(prompt_len)]
        request = Request(request_id=f"r{i}", prompt_token_ids=prompt, sampling_params=params)
        scheduler.add_request(request)
    _step(scheduler)  # the prefill step; decode steps are measured
    totals = {"schedule_ms": 0.0, "inputs_ms": 0.0, "sampling_ms": 0.0, "update_ms": 0.0}
    for _ in range(num_steps):
        for phase, ms in _step(scheduler).items():
            totals[phase] += ms
    result = {phase: ms / num_steps for phase, ms in totals.items()}
    result["per_step_ms"] = sum(result.values())
    return result


def _step(scheduler: Scheduler) -> dict[str, float]:
    t0 = time.perf_counter()
    output = scheduler.schedule()
    t1 = time.perf_counter()
    batch = order_decodes_first(output.scheduled)
    inputs = build_model_inputs(batch, scheduler.block_size, torch.device("cpu"))
    t2 = time.perf_counter()
    build_sampling_tensors(inputs.sample_requests, lambda s: None)
    t3 = time.perf_counter()
    sampled = {s.request_id: SampledToken(7) for s in inputs.sample_requests}
    scheduler.update(output, ModelRunnerOutput(sampled))
    t4 = time.perf_counter()
    ms = 1000.0
    return {
        "schedule_ms": (t1 - t0) * ms,
        "inputs_ms": (t2 - t1) * ms,
        "sampling_ms": (t3 - t2) * ms,
        "update_ms": (t4 - t3) * ms,
    }
