"""Tensor parallelism on the CPU (gloo, one process per rank): greedy tokens identical to one
rank and to transformers, under chunked prefill, prefix-cache hits and forced preemption; a dead
rank fails the engine loudly; no worker outlives its engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import LLM, SamplingParams
from engine.inputs.pooling_params import PoolingParams
from pagedock.errors import TensorParallelError
from tests.engine.conftest import hf_greedy, make_prompts
from tests.tiny_model import make_tiny_llama_dir

pytestmark = pytest.mark.timeout(600)
NUM_NEW_TOKENS = 24
GREEDY = SamplingParams(max_tokens=NUM_NEW_TOKENS, temperature=0.0, ignore_eos=True)
# Small steps and a small pool: prompts are chunked, and requests are preempted and recomputed.
PRESSURE: dict[str, Any] = dict(
    dtype="float32", max_model_len=128, block_size=16, num_kv_blocks=12, max_num_batched_tokens=16
)
# GQA with KV heads split over the ranks (2 of them, tp 2), and with one KV head replicated on
# both ranks; the latter also has biases (row-parallel biases live on rank 0), tied embeddings and
# an odd vocabulary (the last rank's share is padded).
MODELS: dict[str, dict[str, Any]] = {
    "kv-heads-split": dict(num_key_value_heads=2),
    "kv-head-replicated": dict(
        num_key_value_heads=1,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=True,
        vocab_size=509,
    ),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama_dir(tmp_path_factory.mktemp(request.param), **MODELS[request.param])


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    # Two prompts share a 40-token prefix, so the second pass also hits the cache. Ids stay
    # below the smaller model's vocabulary.
    base = make_prompts(6, 10, 60, seed=11)
    shared = make_prompts(1, 40, 40, seed=12)[0]
    return [[3 + t % 500 for t in p] for p in [*base, [*shared, 5, 6, 7], [*shared, 8, 9]]]


def token_ids(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    return [o.token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


@pytest.fixture(scope="module")
def tp2(model_dir: Path) -> Iterator[LLM]:
    llm = LLM(str(model_dir), tensor_parallel_size=2, **PRESSURE)
    yield llm
    llm.shutdown()


def test_tp2_greedy_equals_tp1_and_transformers_under_pressure(
    tp2: LLM, model_dir: Path, prompts: list[list[int]]
) -> None:
    import torch
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    expected = [hf_greedy(hf, p, NUM_NEW_TOKENS) for p in prompts]
    one_rank = token_ids(LLM(str(model_dir), **PRESSURE), prompts)
    first = token_ids(tp2, prompts)
    second = token_ids(tp2, prompts)  # now with prefix-cache hits
    stats = tp2.stats()
    assert stats.num_preemptions > 0
    assert stats.prefix_cache_hits > 0
    assert one_rank == expected
    assert first == expected
    assert second == expected


def test_tp2_prompt_logprobs_equal_one_ranks_under_pressure(
    tp2: LLM, model_dir: Path, prompts: list[list[int]]
) -> None:
    """Every rank computes the prompt-logprob rows rank 0 gathers (the step carries them)."""
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, prompt_logprobs=2)
    one_rank = LLM(str(model_dir), **PRESSURE).generate(prompts, params, use_tqdm=False)
    two_ranks = tp2.generate(prompts, params, use_tqdm=False)
    for ours, theirs, prompt in zip(two_ranks, one_rank, prompts, strict=True):
        assert ours.prompt_logprobs is not None and theirs.prompt_logprobs is not None
        assert ours.prompt_logprobs[0] is None and len(ours.prompt_logprobs) == len(prompt)
        for token_id, a, b in zip(
            prompt[1:], ours.prompt_logprobs[1:], theirs.prompt_logprobs[1:], strict=True
        ):
            assert a is not None and b is not None
            assert abs(a[token_id].logprob - b[token_id].logprob) < 1e-4


def test_tp2_embeddings_equal_one_ranks_beside_generation(
    tp2: LLM, model_dir: Path, prompts: list[list[int]]
) -> None:
    """Rank 0 pools; the other ranks, which know nothing of pooling, run the same collectives
    (steps mixing embedding chunks, generations and preemptions under PRESSURE)."""
    import torch

    params = PoolingParams(pooling_type="MEAN")
    one_rank = LLM(str(model_dir), **PRESSURE).embed(prompts, params, use_tqdm=False)
    for i, prompt in enumerate(prompts[:2]):
        tp2.engine.add_request(f"beside-{i}", prompt, GREEDY)
    two_ranks = tp2.embed(prompts, params, use_tqdm=False)
    for ours, theirs in zip(two_ranks, one_rank, strict=True):
        torch.testing.assert_close(
            torch.tensor(ours.outputs.embedding),
            torch.tensor(theirs.outputs.embedding),
            atol=1e-5,
            rtol=0.0,
        )


def test_every_layer_runs_two_all_reduces_and_each_step_one_logits_gather(tp2: LLM) -> None:
    before = tp2.engine.tp_stats()
    token_ids(tp2, make_prompts(1, 8, 8, seed=3))  # one prefill step, then a decode per token
    after = tp2.engine.tp_stats()
    steps = after["num_steps"] - before["num_steps"]
    num_layers = tp2.engine.model_config.num_hidden_layers
    assert steps == NUM_NEW_TOKENS
    assert after["num_all_reduces"] - before["num_all_reduces"] == steps * (2 * num_layers + 1)
    assert after["num_gathers"] - before["num_gathers"] == steps
    assert after["step_bytes"] > before["step_bytes"]


def test_smollm2_at_tp3_matches_one_rank(smollm2_gguf_path: Path) -> None:
    """The built-in model: 9 attention heads and 3 KV heads, one of each group per rank."""
    texts = ["The capital of France is", "def fibonacci(n):\n    "]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    args: dict[str, Any] = dict(dtype="float32", max_model_len=256, num_kv_blocks=64)
    expected = [
        o.token_ids
        for o in LLM(str(smollm2_gguf_path), **args).generate(texts, params, use_tqdm=False)
    ]
    llm = LLM(str(smollm2_gguf_path), tensor_parallel_size=3, **args)
    try:
        assert [o.token_ids for o in llm.generate(texts, params, use_tqdm=False)] == expected
    finally:
        llm.shutdown()


def worker_pids(llm: LLM) -> list[int]:
    assert llm.engine.tp_executor is not None
    return [p.pid for p in llm.engine.tp_executor.workers if p.pid is not None]


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if is_running(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_a_dead_rank_fails_the_engine_loudly_and_shutdown_leaves_no_process(
    tiny_model_dir: Path,
) -> None:
    llm = LLM(str(tiny_model_dir), tensor_parallel_size=2, dtype="float32", max_model_len=64)
    pids = worker_pids(llm)
    os.kill(pids[0], signal.SIGKILL)
    with pytest.raises(TensorParallelError, match="tensor-parallel"):
        llm.generate(make_prompts(2, 5, 10), GREEDY, use_tqdm=False)
    llm.shutdown()
    assert wait_gone(pids, 10) == []


def test_a_rank_killed_mid_step_fails_the_step_at_once_not_after_a_timeout(
    tiny_model_dir: Path,
) -> None:
    """The worker dies after receiving step 3, while rank 0 is in the step's collectives."""
    llm = LLM(str(tiny_model_dir), tensor_parallel_size=2, dtype="float32", max_model_len=64)
    [pid] = worker_pids(llm)
    runner, steps = llm.engine.runner, []
    send_step = runner.send_step
    assert send_step is not None

    def send_then_kill(batch: Any) -> None:
        send_step(batch)
        steps.append(len(batch))
        if len(steps) == 3:
            os.kill(pid, signal.SIGKILL)

    runner.send_step = send_then_kill
    started = time.monotonic()
    with pytest.raises(TensorParallelError, match="tensor-parallel"):
        llm.generate(make_prompts(2, 5, 10), GREEDY, use_tqdm=False)
    assert time.monotonic() - started < 60  # the collective timeout is 120 s
    llm.shutdown()
    assert wait_gone([pid], 10) == []


_KILLED_PARENT = """
import sys
from engine import LLM
llm = LLM(sys.argv[1], tensor_parallel_size=2, dtype="float32", max_model_len=64)
print(*[p.pid for p in llm.engine.tp_executor.workers], flush=True)
sys.stdin.read()
"""


def test_workers_exit_when_their_engine_is_killed(tiny_model_dir: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT, str(tiny_model_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert pids and all(is_running(p) for p in pids)
    parent.kill()
    parent.wait()
    assert wait_gone(pids, 15) == []
