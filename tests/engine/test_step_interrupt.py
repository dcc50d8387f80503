"""A step cut short between layers for a light tenant's (or a more urgent) newcomer
(engine/core/step_interrupt.py): who may cut which step, that nothing of a cut step counts, that
the next step runs the newcomer's prompt without the cut step's chunks, and that every token
comes out as transformers computes it with no block leaked."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.core.scheduler import Scheduler
from engine.core.step_interrupt import InterruptibleStep, StepInterrupted, StepInterrupter
from engine.inputs.sampling_params import SamplingParams
from engine.runtime.async_engine import AsyncEngine
from engine.runtime.llm_engine import LLMEngine
from tests.engine.conftest import hf_greedy, make_prompts
from tests.engine.factories import fake_runner_output, make_request, make_scheduler

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def snapshot(**fields: Any) -> InterruptibleStep:
    base: dict[str, Any] = dict(
        prefill_tenants=frozenset({"heavy"}),
        most_urgent_prefill=0,
        held=Counter({"heavy": 6, "light": 1}),
        fair=True,
        by_priority=False,
    )
    return InterruptibleStep(**(base | fields))


@pytest.mark.parametrize(
    ("step", "tenant", "priority", "yields"),
    [
        (snapshot(), "light", 0, True),  # holds 2 with it, under its share of 4
        (snapshot(), "new", 0, True),  # holds only it: under any share
        (snapshot(), "heavy", 0, False),  # the step prefills its own prompts
        (snapshot(prefill_tenants=frozenset({"heavy", "light"})), "light", 0, True),  # and others'
        (snapshot(prefill_tenants=frozenset({"light"})), "light", 0, False),  # its own only
        (snapshot(held=Counter({"heavy": 2, "light": 2})), "light", 0, False),  # over its share
        (snapshot(fair=False), "light", 0, False),  # fcfs: tenants are not told apart
        (snapshot(by_priority=True, most_urgent_prefill=10), "heavy", 0, True),  # more urgent
        (snapshot(by_priority=True, most_urgent_prefill=0), "light", 10, False),  # less urgent
        (snapshot(by_priority=True, fair=False, most_urgent_prefill=10), "x", 10, False),
    ],
)
def test_who_may_cut_a_step(step: InterruptibleStep, tenant: str, priority: int, yields: bool):
    assert step.yields_to(tenant, priority, Counter({tenant: 1})) is yields


def test_requests_queued_since_the_step_began_count_as_held() -> None:
    step = snapshot(held=Counter({"heavy": 2, "light": 1}))
    assert not step.yields_to("light", 0, Counter({"light": 1}))  # 2 of 4: at its share
    assert step.yields_to("light", 0, Counter({"light": 1, "heavy": 3}))  # 2 of 7


def heavy_step(sched: Scheduler) -> Any:
    """Heavy decoding twice; its new 64-token prompt in this step beside the decodes."""
    for _ in range(2):
        sched.add_request(make_request(8, max_tokens=50, tenant="heavy", arrival_time=0.0))
    out = sched.schedule()
    sched.update(out, fake_runner_output(out))
    prompt = make_request(64, tenant="heavy", arrival_time=1.0)
    sched.add_request(prompt)
    out = sched.schedule()
    assert [s.request_id for s in out.scheduled if not s.is_decode] == [prompt.request_id]
    return out, prompt


def heavy_step_begun(sched: Scheduler) -> tuple[Any, Any, StepInterrupter]:
    """heavy_step's, begun on an interrupter."""
    out, prompt = heavy_step(sched)
    interrupter = StepInterrupter(enabled=True)
    interrupter.begin(out, sched)
    return out, prompt, interrupter


def test_a_cut_steps_chunk_waits_a_step_for_the_newcomer_and_nothing_of_it_counts() -> None:
    sched = make_scheduler(max_num_batched_tokens=2048)
    out, prompt, interrupter = heavy_step_begun(sched)
    interrupter.offer("heavy", 0)
    interrupter.check(0, 4)  # its own tenant's newcomer cuts nothing
    interrupter.offer("light", 0)
    with pytest.raises(StepInterrupted):
        interrupter.check(0, 4)
    interrupter.end()
    assert prompt.num_computed_tokens == 0 and interrupter.num_interrupted == 1
    light = make_request(16, tenant="light", arrival_time=2.0)
    sched.add_request(light)
    out = sched.schedule()
    assert [s.request_id for s in out.scheduled if not s.is_decode] == [light.request_id]
    assert sum(s.is_decode for s in out.scheduled) == 2  # the decodes went on
    interrupter.begin(out, sched)  # the step after a cut is never cut
    interrupter.offer("other", 0)
    interrupter.check(0, 4)
    interrupter.end()
    sched.update(out, fake_runner_output(out))
    out = sched.schedule()
    assert prompt.request_id in [s.request_id for s in out.scheduled if not s.is_decode]


def test_a_step_is_cut_only_in_its_first_three_quarters_and_only_while_it_runs() -> None:
    sched = make_scheduler(max_num_batched_tokens=2048)
    out, _, interrupter = heavy_step_begun(sched)
    interrupter.offer("light", 0)
    interrupter.check(3, 4)  # the last quarter: finishing is cheaper
    interrupter.end()
    interrupter.offer("light", 0)  # between steps: nothing to cut
    interrupter.begin(out, sched)
    interrupter.check(0, 4)  # an offer made for another step cuts nothing
    interrupter.offer("light", 0)
    with pytest.raises(StepInterrupted):
        interrupter.check(2, 4)
    off = StepInterrupter(enabled=False)
    off.begin(out, sched)
    off.offer("light", 0)
    off.check(0, 4)


def engine_of(model_dir: Path, **settings: Any) -> LLMEngine:
    config = EngineConfig(
        model=str(model_dir), dtype="float32", num_kv_blocks=64, max_model_len=256, num_threads=1
    )
    return LLMEngine(dataclasses.replace(config, **settings))


def add(engine: LLMEngine, request_id: str, prompt: list[int], tenant: str) -> None:
    request = engine.input_processor.process(request_id, prompt, GREEDY, tenant=tenant)
    engine.output_processor.add_request(engine.add_engine_request(request))


def run(engine: LLMEngine) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            tokens[output.request_id] = list(output.outputs[0].token_ids)  # cumulative
    return tokens


def test_a_cut_step_changes_no_token_and_leaks_no_block(
    tiny_model_dir: Path, hf_tiny_model: Any
) -> None:
    engine = engine_of(tiny_model_dir)
    prompts = make_prompts(3, 40, 90, seed=37)
    add(engine, "heavy-0", prompts[0], "heavy")
    engine.step()  # heavy-0's prompt: it decodes from now on
    add(engine, "heavy-1", prompts[1], "heavy")
    interrupter = engine.step_interrupter
    check = interrupter.check

    def newcomer_arrives(layer: int, num_layers: int) -> None:
        # As AsyncEngine does when it queues light's request during the step.
        interrupter.offer("light", 0)
        check(layer, num_layers)

    interrupter.check = newcomer_arrives  # type: ignore[method-assign]
    assert engine.step_core() == []  # cut: nothing computed, nothing sampled
    interrupter.check = check  # type: ignore[method-assign]
    assert engine.stats().num_interrupted_steps == 1
    add(engine, "light-0", prompts[2], "light")
    requests = engine.scheduler.requests
    engine.step()  # light's prompt beside heavy-0's decode; heavy-1's chunk waits
    assert requests["light-0"].num_computed_tokens == len(prompts[2])
    assert requests["heavy-1"].num_computed_tokens == 0
    tokens = run(engine)
    for request_id, prompt in zip(("heavy-0", "heavy-1", "light-0"), prompts, strict=True):
        assert tokens[request_id] == hf_greedy(hf_tiny_model, prompt, GREEDY.max_tokens)
    stats = engine.stats()
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


@pytest.mark.asyncio
async def test_a_request_queued_mid_step_cuts_it_through_the_async_engine(
    tiny_model_dir: Path,
) -> None:
    engine = engine_of(tiny_model_dir)
    interrupter = engine.step_interrupter
    check, offer = interrupter.check, interrupter.offer
    armed, in_step, light_offered = threading.Event(), threading.Event(), threading.Event()

    def held_in_a_prefill_step(layer: int, num_layers: int) -> None:
        if armed.is_set() and interrupter.cuttable and not in_step.is_set():
            in_step.set()  # heavy-1's prompt is under way: let the test queue light's request
            assert light_offered.wait(30)
        check(layer, num_layers)

    def offer_seen(tenant: str, priority: int) -> None:
        offer(tenant, priority)
        if tenant == "light":
            light_offered.set()

    interrupter.check = held_in_a_prefill_step  # type: ignore[method-assign]
    interrupter.offer = offer_seen  # type: ignore[method-assign]
    async_engine = AsyncEngine(engine)
    async_engine.start()
    try:
        prompts = make_prompts(3, 40, 60, seed=38)
        first = await async_engine.add_request("heavy-0", prompts[0], GREEDY, tenant="heavy")
        await anext(first.batches())  # heavy-0's prompt is done
        armed.set()
        second = await async_engine.add_request("heavy-1", prompts[1], GREEDY, tenant="heavy")
        assert await asyncio.to_thread(in_step.wait, 30)
        light = await async_engine.add_request("light-0", prompts[2], GREEDY, tenant="light")
        for stream in (first, second, light):
            outputs = [o async for batch in stream.batches() for o in batch]
            assert outputs[-1].finished
        num_interrupted = await async_engine.call(lambda e: e.stats().num_interrupted_steps)
        assert num_interrupted == 1
    finally:
        await async_engine.shutdown()
