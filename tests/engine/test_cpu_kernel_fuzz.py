"""The paged decode kernel under random shapes and metadata: every layout the loader accepts
matches the torch reference (over a float32 cache, or a bf16 one against float32 attention over
the same rounded K/V), and invalid metadata raises (a RuntimeError, never a signal)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.attention.torch_attention import paged_decode_attention
from engine.kernels.cpu_kernels import load_cpu_kernels
from tests.engine.test_cpu_kernels import random_paged_cache

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")


@st.composite
def decode_problems(draw: st.DrawFn) -> dict[str, object]:
    return {
        "head_dim": draw(st.sampled_from([16, 32, 64, 128])),
        "group": draw(st.integers(1, 8)),
        "num_kv_heads": draw(st.integers(1, 32)),
        "block_size": draw(st.sampled_from([8, 16, 32, 64, 128])),
        "seq_lens": draw(st.lists(st.integers(0, 300), min_size=1, max_size=12)),
        "seed": draw(st.integers(0, 2**16)),
        "kv_dtype": draw(st.sampled_from([torch.float32, torch.bfloat16])),
    }


def run_kernel(query, k_cache, v_cache, tables, lens, out=None):  # type: ignore[no-untyped-def]
    assert kernels is not None
    out = torch.full_like(query, float("nan")) if out is None else out
    kernels.paged_decode(query, k_cache, v_cache, tables, lens, 0.1, out)
    return out


@settings(max_examples=80, deadline=None)
@given(decode_problems())
def test_any_accepted_layout_matches_the_reference(problem: dict) -> None:
    torch.manual_seed(problem["seed"])
    seq_lens, heads = problem["seq_lens"], problem["num_kv_heads"] * problem["group"]
    k_cache, v_cache, tables = random_paged_cache(
        seq_lens, problem["block_size"], problem["num_kv_heads"], problem["head_dim"]
    )
    k_cache, v_cache = k_cache.to(problem["kv_dtype"]), v_cache.to(problem["kv_dtype"])
    query = torch.randn(len(seq_lens), heads, problem["head_dim"])
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    expected = paged_decode_attention(
        query, k_cache.float(), v_cache.float(), tables, lens, max(max(seq_lens), 1), 0.1
    )
    out = run_kernel(query, k_cache, v_cache, tables, lens)
    rows = lens > 0  # an empty context has no defined output; the reference gives NaN there
    torch.testing.assert_close(out[rows], expected[rows], rtol=1e-4, atol=1e-5)


def test_the_layout_that_overflowed_the_per_item_state_is_computed() -> None:
    # 25 KV heads x group 5 = 125 query heads: more than one work item's state holds (64).
    torch.manual_seed(0)
    seq_lens = [40]
    k_cache, v_cache, tables = random_paged_cache(seq_lens, 16, 25, 32)
    query = torch.randn(1, 125, 32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    expected = paged_decode_attention(query, k_cache, v_cache, tables, lens, 40, 0.1)
    torch.testing.assert_close(
        run_kernel(query, k_cache, v_cache, tables, lens), expected, rtol=1e-4, atol=1e-5
    )


def valid_problem() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    k_cache, v_cache, tables = random_paged_cache([20, 33], 16, 2, 32)
    return (
        torch.randn(2, 4, 32),
        k_cache,
        v_cache,
        tables,
        torch.tensor([20, 33], dtype=torch.int32),
    )


def with_block_id(block_id: int) -> tuple[torch.Tensor, ...]:
    query, k_cache, v_cache, tables, lens = valid_problem()
    tables[1, 1] = block_id
    return query, k_cache, v_cache, tables, lens


def with_lens(*lens: int) -> tuple[torch.Tensor, ...]:
    query, k_cache, v_cache, tables, _ = valid_problem()
    return query, k_cache, v_cache, tables, torch.tensor(lens, dtype=torch.int32)


def with_query(query: torch.Tensor) -> tuple[torch.Tensor, ...]:
    _, k_cache, v_cache, tables, lens = valid_problem()
    return query, k_cache, v_cache, tables, lens


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        (with_block_id(10_000), "outside the cache"),
        (with_block_id(-3), "outside the cache"),
        (with_lens(20, 10_000), "beyond its block table"),
        (with_lens(-1, 33), "beyond its block table"),
        (with_lens(20), "one row per sequence"),
        (with_query(torch.randn(2, 5, 32)), "not a multiple"),
        (with_query(torch.randn(2, 4, 16)), "head_dim differ"),
        (with_query(torch.randn(2, 4)), "expected query"),
    ],
    ids=[
        "block-id-high",
        "block-id-negative",
        "length-past-table",
        "negative-length",
        "lens-count",
        "heads-not-multiple",
        "head-dim",
        "query-rank",
    ],
)
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
def test_invalid_metadata_raises_instead_of_reading_past_the_cache(
    problem: tuple[torch.Tensor, ...], message: str, kv_dtype: torch.dtype
) -> None:
    query, k_cache, v_cache, tables, lens = problem
    out = torch.empty_like(query)
    with pytest.raises(RuntimeError, match=message):
        run_kernel(query, k_cache.to(kv_dtype), v_cache.to(kv_dtype), tables, lens, out=out)


def test_an_output_of_the_wrong_shape_is_refused() -> None:
    query, k_cache, v_cache, tables, lens = valid_problem()
    with pytest.raises(RuntimeError, match="out must match query"):
        run_kernel(query, k_cache, v_cache, tables, lens, out=torch.empty(1, 4, 32))
