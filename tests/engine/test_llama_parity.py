"""pagedock's llama against transformers' (an independent implementation) on the same weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from tests.engine.conftest import hf_greedy, make_prompts, prefill_logits

NUM_NEW_TOKENS = 32
GREEDY = SamplingParams(max_tokens=NUM_NEW_TOKENS, temperature=0.0, ignore_eos=True)
SHORT = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    # Mixed lengths, including some that are exact multiples of the block size.
    lengths_from = make_prompts(6, 3, 90, seed=1)
    return [*lengths_from, make_prompts(1, 32, 32, seed=2)[0], make_prompts(1, 48, 48, seed=3)[0]]


@pytest.fixture(scope="module")
def expected(hf_tiny_model: Any, prompts: list[list[int]]) -> list[list[int]]:
    return [hf_greedy(hf_tiny_model, p, NUM_NEW_TOKENS) for p in prompts]


def make_llm(model_dir: Path, **overrides: Any) -> LLM:
    args: dict[str, Any] = dict(dtype="float32", num_kv_blocks=256, max_model_len=256)
    args.update(overrides)
    return LLM(model=str(model_dir), **args)


def generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    return [o.token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


def test_prefill_logits_match_transformers(tiny_model_dir: Path, hf_tiny_model: Any) -> None:
    llm = make_llm(tiny_model_dir)
    prompt = make_prompts(1, 40, 40, seed=7)[0]
    with torch.inference_mode():
        theirs = hf_tiny_model(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(prefill_logits(llm, prompt), theirs, atol=1e-4, rtol=1e-4)


def test_greedy_one_at_a_time_matches_transformers(
    tiny_model_dir: Path, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    llm = make_llm(tiny_model_dir)
    assert [generate(llm, [p])[0] for p in prompts] == expected


def test_greedy_batched_matches_transformers(
    tiny_model_dir: Path, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    assert generate(make_llm(tiny_model_dir), prompts) == expected


def test_greedy_with_tiny_prefill_chunks_matches_transformers(
    tiny_model_dir: Path, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    llm = make_llm(tiny_model_dir, max_num_batched_tokens=8)
    assert generate(llm, prompts) == expected


def test_greedy_without_chunked_prefill_matches_transformers(
    tiny_model_dir: Path, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    llm = make_llm(tiny_model_dir, enable_chunked_prefill=False, max_num_batched_tokens=256)
    assert generate(llm, prompts) == expected


def test_greedy_with_prefix_cache_hits_matches_transformers(
    tiny_model_dir: Path, hf_tiny_model: Any, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    llm = make_llm(tiny_model_dir)
    assert generate(llm, prompts) == expected
    # The same prompts again hit their cached blocks; and prompts sharing a 3-block prefix.
    assert generate(llm, prompts) == expected
    assert llm.stats().prefix_cache_hits > 0
    shared = make_prompts(1, 48, 48, seed=11)[0]
    variants = [shared + tail for tail in make_prompts(3, 1, 20, seed=12)]
    want = [hf_greedy(hf_tiny_model, p, NUM_NEW_TOKENS) for p in variants]
    assert generate(llm, variants) == want


def test_greedy_under_preemption_matches_transformers(
    tiny_model_dir: Path, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    # 8 sequences of up to ~120 tokens need ~50 blocks; 16 force preemption by recompute.
    llm = make_llm(tiny_model_dir, num_kv_blocks=16, max_model_len=256)
    assert generate(llm, prompts) == expected
    assert llm.stats().num_preemptions > 0
    assert llm.stats().num_free_kv_blocks == 16


def test_greedy_with_the_triton_backend_matches_transformers(
    tiny_model_dir: Path, hf_tiny_model: Any, prompts: list[list[int]]
) -> None:
    """The Triton kernels (through the interpreter on CPU) inside the whole engine: chunked
    prefill, decodes mixed in, then prefix-cache hits on the second pass."""
    pytest.importorskip("triton")
    llm = make_llm(tiny_model_dir, attention_backend="triton", max_num_batched_tokens=32)
    subset = [p[:24] for p in prompts[:3]]
    want = [hf_greedy(hf_tiny_model, p, SHORT.max_tokens or 0) for p in subset]
    assert [o.token_ids for o in llm.generate(subset, SHORT, use_tqdm=False)] == want
    assert [o.token_ids for o in llm.generate(subset, SHORT, use_tqdm=False)] == want
    assert llm.stats().prefix_cache_hits > 0


def test_greedy_with_the_pure_torch_backend_matches_transformers(
    tiny_model_dir: Path, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    llm = make_llm(tiny_model_dir, attention_backend="torch-sdpa", max_num_batched_tokens=8)
    assert generate(llm, prompts) == expected
