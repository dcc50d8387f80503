"""n > 1: n completions per prompt, sharing the prompt's KV blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput


def test_n_completions_come_back_indexed_and_seeded_reproducibly(tiny_model_dir: Path) -> None:
    llm = LLM(model=str(tiny_model_dir), num_kv_blocks=64, max_model_len=256)
    params = SamplingParams(n=3, max_tokens=6, temperature=1.0, seed=42, ignore_eos=True)
    first = llm.generate([list(range(10, 50))], params, use_tqdm=False)[0]
    again = llm.generate([list(range(10, 50))], params, use_tqdm=False)[0]
    assert [c.index for c in first.outputs] == [0, 1, 2]
    assert [c.token_ids for c in first.outputs] == [c.token_ids for c in again.outputs]
    assert len({tuple(c.token_ids) for c in first.outputs}) > 1
    assert all(len(c.token_ids) == 6 for c in first.outputs)
    assert llm.stats().num_free_kv_blocks == 64


def test_siblings_find_the_prompt_blocks_in_the_cache(tiny_model_dir: Path) -> None:
    llm = LLM(model=str(tiny_model_dir), num_kv_blocks=64, max_model_len=256)
    prompt = list(range(10, 74))  # 4 full blocks
    llm.generate([prompt], SamplingParams(n=4, max_tokens=2, temperature=0.8), use_tqdm=False)
    # Three siblings each find 3 of the 4 blocks (the last is recomputed for its logits).
    assert llm.stats().prefix_cache_hits == 3 * 48


def test_aborting_the_parent_aborts_every_child(tiny_model_dir: Path) -> None:
    llm = LLM(model=str(tiny_model_dir), num_kv_blocks=64, max_model_len=256)
    engine = llm.engine
    engine.add_request("fan", list(range(10, 40)), SamplingParams(n=3, max_tokens=50))
    engine.step()
    engine.step()
    out = engine.abort_request("fan")
    assert out is not None and out.finished
    assert not engine.has_unfinished_requests()
    assert engine.stats().num_free_kv_blocks == 64


def test_a_failed_child_ends_its_siblings_before_they_run(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 34: a constraint too costly for the first child (a 400) is as costly for the others;
    # they waited for its prompt blocks and, released, each ran until its own mask went over.
    llm = LLM(model=str(tiny_model_dir), num_kv_blocks=64, max_model_len=256)
    engine = llm.engine
    execute, calls = engine.runner.execute, []

    def fail_once(scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        calls.append([s.request_id for s in scheduler_output.scheduled])
        if len(calls) == 1:
            raise RuntimeError("the first child's step fails")
        return execute(scheduler_output)

    monkeypatch.setattr(engine.runner, "execute", fail_once)
    engine.add_request("fan", list(range(10, 40)), SamplingParams(n=3, max_tokens=50))
    [out] = engine.step()
    assert out.finished and out.error is not None and "the first child's step fails" in out.error
    assert [c.finish_reason for c in out.outputs] == ["error", "abort", "abort"]
    assert calls == [["fan#0"]]  # the siblings never ran
    assert not engine.has_unfinished_requests()
    assert engine.stats().num_free_kv_blocks == 64
