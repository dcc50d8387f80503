"""CUDA-graph decode steps: the padding, persistent buffers and size choice, checked on the CPU.

A CUDA graph needs a GPU; `EagerCapture` replays by re-running the captured function on the same
persistent buffers, which is exactly what a graph replay computes. So these tests check what can
go wrong around the capture — padding rows that must write nowhere, stale buffer rows, the
smallest-size choice, the eager fallback — and the GPU check (benchmarks/gpu/check.sh) checks the
capture itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from engine.kernels.cpu_kernels import load_cpu_kernels
from engine.worker.cuda_graph_runner import EagerCapture, capture_sizes, is_graphable
from tests.engine.conftest import hf_greedy, make_prompts

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)

# Padding rows write to slot -1, which the C++ cache write skips; the pure torch path's
# index_copy_ has no such rule, and the GPU path uses the Triton write (which skips it too).
pytestmark = pytest.mark.skipif(load_cpu_kernels() is None, reason="needs the C++ CPU kernels")


def test_capture_sizes_cover_every_batch_up_to_the_largest() -> None:
    assert capture_sizes(256) == [1, 2, 4, *range(8, 257, 8)]
    assert capture_sizes(12) == [1, 2, 4, 8, 12]
    assert capture_sizes(1) == [1]
    assert capture_sizes(1000)[-1] == 256


def test_only_decode_only_steps_small_enough_take_the_graph_path(tiny_model_dir: Path) -> None:
    from engine.core.scheduler_output import ScheduledRequest

    def scheduled(tokens: int, do_sample: bool = True) -> ScheduledRequest:
        return ScheduledRequest("r", [5] * tokens, 10, [0], do_sample, GREEDY, [], [])

    assert is_graphable([scheduled(1), scheduled(1)], max_size=8)
    assert not is_graphable([scheduled(1), scheduled(3)], max_size=8)  # a prefill chunk
    assert not is_graphable([scheduled(1, do_sample=False)], max_size=8)
    assert not is_graphable([scheduled(1)] * 9, max_size=8)
    assert not is_graphable([], max_size=8)


def graphed_llm(model_dir: Path, **overrides: Any) -> tuple[LLM, list[int]]:
    """An LLM whose decode steps go through the graph runner; the list counts its replays."""
    args: dict[str, Any] = dict(dtype="float32", num_kv_blocks=128, max_model_len=128)
    args.update(overrides)
    llm = LLM(model=str(model_dir), **args)
    runner = llm.engine.runner
    runner.capture_decode_graphs(llm.engine.config.max_num_seqs, 128, EagerCapture())
    replays: list[int] = []
    assert runner.graphs is not None
    graphs = runner.graphs
    original = graphs.run

    def counting_run(batch: list[Any]) -> torch.Tensor:
        replays.append(len(batch))
        return original(batch)

    graphs.run = counting_run  # type: ignore[method-assign]
    return llm, replays


@pytest.mark.parametrize("num_prompts", [1, 3, 9])
def test_graph_decodes_match_transformers_with_padded_batches(
    tiny_model_dir: Path, hf_tiny_model: Any, num_prompts: int
) -> None:
    # 3 and 9 requests pad to the captured sizes 4 and 16: padding rows must not disturb them.
    prompts = make_prompts(num_prompts, 5, 70, seed=num_prompts)
    llm, replays = graphed_llm(tiny_model_dir, max_num_seqs=16)
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == [hf_greedy(hf_tiny_model, p, 24) for p in prompts]
    assert replays and max(replays) == num_prompts
    assert llm.stats().num_free_kv_blocks == 128  # nothing leaked


def test_batches_above_the_largest_graph_run_eagerly(
    tiny_model_dir: Path, hf_tiny_model: Any
) -> None:
    prompts = make_prompts(6, 5, 40, seed=7)
    llm, replays = graphed_llm(tiny_model_dir, max_num_seqs=16)
    assert llm.engine.runner.graphs is not None
    llm.engine.runner.graphs.max_size = 4  # pretend only sizes up to 4 were captured
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == [hf_greedy(hf_tiny_model, p, 24) for p in prompts]
    assert all(n <= 4 for n in replays)  # 6 running: eager; fewer at the tail: graphs


def test_stale_rows_of_a_larger_earlier_batch_do_not_leak_into_a_smaller_one(
    tiny_model_dir: Path, hf_tiny_model: Any
) -> None:
    llm, replays = graphed_llm(tiny_model_dir, max_num_seqs=8)
    first = make_prompts(8, 30, 60, seed=11)
    llm.generate(first, GREEDY, use_tqdm=False)  # fills every buffer row
    second = make_prompts(2, 3, 10, seed=12)
    outs = llm.generate(second, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == [hf_greedy(hf_tiny_model, p, 24) for p in second]
    assert 2 in replays
