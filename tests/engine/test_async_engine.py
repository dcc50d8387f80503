"""AsyncEngine: the engine thread steps, the output worker detokenizes, the event loop delivers."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine.config import EngineConfig
from engine.core.scheduler_output import EngineCoreOutput
from engine.inputs.sampling_params import RequestOutputKind, SamplingParams
from engine.runtime.async_engine import AsyncEngine
from engine.runtime.llm_engine import LLMEngine
from engine.runtime.outputs import RequestOutput
from pagedock.text.detokenizer import IncrementalDetokenizer

NUM_KV_BLOCKS = 64
DELTA = RequestOutputKind.DELTA


@pytest.fixture(scope="module")
def llm_engine(tiny_model_dir: Path) -> LLMEngine:
    # No prefix caching: a rerun of a prompt computes exactly what the first run did.
    config = EngineConfig(
        model=str(tiny_model_dir),
        max_model_len=256,
        num_kv_blocks=NUM_KV_BLOCKS,
        num_threads=1,
        enable_prefix_caching=False,
    )
    return LLMEngine(config)


@pytest_asyncio.fixture
async def engine(llm_engine: LLMEngine) -> AsyncIterator[AsyncEngine]:
    async_engine = AsyncEngine(llm_engine)
    async_engine.start()
    yield async_engine
    await async_engine.shutdown()


async def generate(
    engine: AsyncEngine,
    request_id: str,
    kind: RequestOutputKind = DELTA,
    temperature: float = 0.0,
    **params: Any,
) -> list[RequestOutput]:
    prompt = engine.engine.tokenizer.encode("The quick brown fox")  # type: ignore[union-attr]
    sampling = SamplingParams(output_kind=kind, temperature=temperature, **params)
    stream = await engine.add_request(request_id, prompt, sampling)
    return [output async for batch in stream.batches() for output in batch]


def text_of(outputs: list[RequestOutput], index: int = 0) -> str:
    return "".join(c.text for o in outputs for c in o.outputs if c.index == index)


async def num_free_blocks(engine: AsyncEngine) -> int:
    return await engine.call(lambda e: e.stats().num_free_kv_blocks)


def concatenated(outputs: list[RequestOutput], index: int) -> tuple[str, list[int], list[Any]]:
    completions = [c for o in outputs for c in o.outputs if c.index == index]
    token_ids = [t for c in completions for t in c.token_ids]
    return text_of(outputs, index), token_ids, [lp for c in completions for lp in c.logprobs or []]


@pytest.mark.asyncio
@pytest.mark.parametrize("n", [1, 2])
async def test_delta_outputs_concatenate_to_the_final_only_output(
    engine: AsyncEngine, n: int
) -> None:
    params: dict[str, Any] = dict(max_tokens=24, ignore_eos=True, logprobs=1, n=n, seed=3)
    deltas = await generate(engine, f"delta-{n}", temperature=1.0, **params)
    final_only = RequestOutputKind.FINAL_ONLY
    finals = await generate(engine, f"final-{n}", temperature=1.0, kind=final_only, **params)
    assert len(finals) == 1 and finals[0].finished and deltas[-1].finished
    tokenizer = engine.engine.tokenizer
    assert tokenizer is not None
    for c in finals[0].outputs:
        text, token_ids, logprobs = concatenated(deltas, c.index)
        assert (text, token_ids, logprobs) == (c.text, c.token_ids, c.logprobs)
        assert len(token_ids) == 24 and text == tokenizer.decode(token_ids)


@pytest.mark.asyncio
async def test_a_stop_string_finishes_the_request_through_the_output_worker(
    engine: AsyncEngine,
) -> None:
    full = text_of(await generate(engine, "full", max_tokens=40, ignore_eos=True))
    # Two ASCII letters from the second half: a stop string the greedy text is sure to reach.
    start = next(i for i in range(len(full) // 2, len(full) - 1) if full[i : i + 2].isalpha())
    stop = full[start : start + 2]
    outputs = await generate(engine, "stopped", max_tokens=40, ignore_eos=True, stop=[stop])
    last = outputs[-1].outputs[0]
    assert (last.finish_reason, last.stop_reason) == ("stop", stop)
    assert text_of(outputs) == full[: full.index(stop)]
    assert sum(len(c.token_ids) for o in outputs for c in o.outputs) < 40
    # The worker asked the engine to finish the request before the final output went out.
    assert await num_free_blocks(engine) == NUM_KV_BLOCKS


@pytest.mark.asyncio
async def test_an_abort_ends_the_stream_and_frees_the_blocks(
    engine: AsyncEngine, llm_engine: LLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Steps of at least 20 ms: 200 tokens then take 4 s, so the abort lands before the request
    # ends even when a loaded machine starves the event loop (the tiny model alone steps in ~1 ms).
    step_core = llm_engine.step_core

    def slow_step() -> list[EngineCoreOutput]:
        time.sleep(0.02)
        return step_core()

    monkeypatch.setattr(llm_engine, "step_core", slow_step)
    prompt = list(range(10, 60))
    sampling = SamplingParams(max_tokens=200, ignore_eos=True, output_kind=DELTA, n=2)
    stream = await engine.add_request("doomed", prompt, sampling)
    outputs: list[RequestOutput] = []
    async for batch in stream.batches():
        outputs += batch
        if len(outputs) == 1:
            engine.abort("doomed")  # at once, with no round trip to the engine thread first
            assert engine.stats.num_free_kv_blocks < NUM_KV_BLOCKS  # as of the last step
    assert outputs[-1].finished
    assert {c.finish_reason for c in outputs[-1].outputs} == {"abort"}
    assert await num_free_blocks(engine) == NUM_KV_BLOCKS
    assert engine.num_in_flight == 0


@pytest.mark.asyncio
async def test_the_engine_thread_never_runs_the_detokenizer(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: set[str] = set()
    update = IncrementalDetokenizer.update

    def recording_update(self: IncrementalDetokenizer, *args: Any, **kwargs: Any) -> Any:
        threads.add(threading.current_thread().name)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(IncrementalDetokenizer, "update", recording_update)
    outputs = await generate(engine, "watched", max_tokens=8, stop=["zzz"])
    assert outputs[-1].finished
    assert threads == {"pagedock-output"}


@pytest.mark.asyncio
async def test_listeners_get_the_step_and_output_stats(engine: AsyncEngine) -> None:
    generated: list[int] = []
    finished: list[list[str]] = []

    def on_outputs(stats: Any) -> None:
        generated.append(stats.num_generation_tokens)
        finished.extend(f.finish_reasons for f in stats.finished)

    engine.add_output_listener(on_outputs)
    await generate(engine, "counted", max_tokens=5, ignore_eos=True)
    assert sum(generated) == 5 and finished == [["length"]]
