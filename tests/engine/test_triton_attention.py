"""The Triton attention kernels against the torch reference (engine.attention.torch_attention).

On CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set here before triton is
imported) in fp32. With PAGEDOCK_TEST_DEVICE=cuda they are compiled and run on the GPU in fp16
and bf16 (benchmarks/gpu/check.sh does this). The reference always runs in float64 on the same
inputs, so the measured error is the kernel's alone. Outputs are poisoned with NaN first: an
element a kernel fails to write fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEVICE = os.environ.get("PAGEDOCK_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

triton = pytest.importorskip("triton")

from engine.attention import torch_attention as ref  # noqa: E402
from engine.attention import triton_attention as tri  # noqa: E402
from engine.attention.backend import AttentionMetadata  # noqa: E402
from tests.engine.attention_factories import attention_metadata, make_block_tables  # noqa: E402

if DEVICE == "cpu" and not os.environ.get("TRITON_INTERPRET"):
    pytest.skip(
        "TRITON_INTERPRET is unset: Triton kernels can't run on CPU", allow_module_level=True
    )
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip("PAGEDOCK_TEST_DEVICE=cuda but no CUDA device", allow_module_level=True)

DTYPES = [torch.float32] if DEVICE == "cpu" else [torch.float16, torch.bfloat16]
# max |out - ref| / max |ref|
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


@dataclass(frozen=True)
class Shape:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int

    def __str__(self) -> str:
        group = self.num_heads // self.num_kv_heads
        return f"gqa{group}-h{self.num_heads}-d{self.head_dim}-bs{self.block_size}"


# GQA ratios 1, 4 and 8; head dims 16 to 128; block sizes 16 and 32.
SHAPES = [Shape(4, 4, 64, 16), Shape(8, 2, 128, 32), Shape(16, 2, 32, 16), Shape(8, 1, 16, 32)]


def randn(*shape: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(device=DEVICE, dtype=dtype)


def make_cache(
    shape: Shape, num_blocks: int, dtype: torch.dtype, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    dims = (num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim)
    return randn(*dims, gen=gen, dtype=dtype), randn(*dims, gen=gen, dtype=dtype)


def make_metadata(
    query_lens: list[int], seq_lens: list[int], block_size: int, gen: torch.Generator
) -> tuple[AttentionMetadata, int]:
    return attention_metadata(query_lens, seq_lens, block_size, gen, DEVICE)


def poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full_like(like, float("nan"))


def f64(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.double() for t in tensors]


def assert_matches(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite output elements"
    err = (out.double() - expected).abs().max() / expected.abs().max()
    assert err < TOLERANCE[dtype], f"relative error {err:.2e} >= {TOLERANCE[dtype]:.0e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES[:2], ids=str)
def test_write_kv_cache_matches_reference(shape: Shape, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    meta, num_blocks = make_metadata([1, 1, 9, 20], [5, 33, 9, 47], shape.block_size, gen)
    k_cache, v_cache = make_cache(shape, num_blocks, dtype, gen)
    # K and V as strided views of one fused projection, as a model produces them.
    kv = randn(meta.num_tokens, 2 * shape.num_kv_heads, shape.head_dim, gen=gen, dtype=dtype)
    key, value = kv[:, : shape.num_kv_heads], kv[:, shape.num_kv_heads :]
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    ref.write_kv_cache(key, value, expected_k, expected_v, meta.slot_mapping)
    tri.write_kv_cache_triton(key, value, k_cache, v_cache, meta.slot_mapping)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_write_kv_cache_skips_negative_slots() -> None:
    gen = torch.Generator().manual_seed(1)
    shape = SHAPES[0]
    k_cache, v_cache = make_cache(shape, 4, torch.float32, gen)
    key = randn(3, shape.num_kv_heads, shape.head_dim, gen=gen, dtype=torch.float32)
    slots = torch.tensor([5, -1, 40], dtype=torch.int64, device=DEVICE)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    ref.write_kv_cache(key[[0, 2]], key[[0, 2]], expected_k, expected_v, slots[[0, 2]])
    tri.write_kv_cache_triton(key, key, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


DECODE_SEQ_LENS = [1, 17, 70, 133, 32]


def run_decode(
    shape: Shape, dtype: torch.dtype, num_splits: int | None, seq_lens: list[int]
) -> None:
    gen = torch.Generator().manual_seed(2)
    block_tables, num_blocks = make_block_tables(seq_lens, shape.block_size, gen, DEVICE)
    k_cache, v_cache = make_cache(shape, num_blocks, dtype, gen)
    query = randn(len(seq_lens), shape.num_heads, shape.head_dim, gen=gen, dtype=dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    scale = shape.head_dim**-0.5
    out = tri.paged_decode_attention_triton(
        query,
        k_cache,
        v_cache,
        block_tables,
        lens,
        max(seq_lens),
        scale,
        out=poisoned(query),
        num_splits=num_splits,
    )
    q64, k64, v64 = f64(query, k_cache, v_cache)
    expected = ref.paged_decode_attention(q64, k64, v64, block_tables, lens, max(seq_lens), scale)
    assert_matches(out, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_paged_decode_matches_reference(shape: Shape, dtype: torch.dtype) -> None:
    run_decode(shape, dtype, num_splits=1, seq_lens=DECODE_SEQ_LENS)


@pytest.mark.parametrize("num_splits", [2, 3, 5])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES[:3], ids=str)
def test_split_k_decode_matches_reference(
    shape: Shape, dtype: torch.dtype, num_splits: int
) -> None:
    # Short sequences leave trailing splits empty: the merge must ignore them.
    run_decode(shape, dtype, num_splits=num_splits, seq_lens=DECODE_SEQ_LENS)


def test_decode_picks_split_k_by_shape() -> None:
    run_decode(SHAPES[1], torch.float32, num_splits=None, seq_lens=[600])


@pytest.mark.parametrize(
    ("num_seqs", "num_kv_heads", "max_seq_len", "expected"),
    [
        (64, 8, 2048, 1),  # 512 programs fill 128 SMs x 4
        (64, 4, 2048, 2),  # 256 programs: two splits of 1024 tokens
        (2, 8, 32768, 32),  # few sequences, long context: capped
        (2, 8, 300, 1),  # too short to split
    ],
)
def test_choose_num_splits(
    num_seqs: int, num_kv_heads: int, max_seq_len: int, expected: int
) -> None:
    assert tri.choose_num_splits(num_seqs, num_kv_heads, max_seq_len, num_sms=128) == expected


def test_merge_splits_matches_reference_and_ignores_empty_splits() -> None:
    gen = torch.Generator().manual_seed(3)
    num_seqs, num_heads, num_splits, head_dim, tokens_per_split = 3, 4, 5, 32, 16
    seq_lens = torch.tensor([1, 40, 80], dtype=torch.int32, device=DEVICE)  # 1, 3, 5 splits
    part_acc = randn(num_seqs, num_heads, num_splits, head_dim, gen=gen, dtype=torch.float32)
    part_max = randn(num_seqs, num_heads, num_splits, gen=gen, dtype=torch.float32) * 4
    part_sum = randn(num_seqs, num_heads, num_splits, gen=gen, dtype=torch.float32).abs() + 1
    for seq, valid in enumerate([1, 3, 5]):
        for t in (part_acc, part_max, part_sum):
            t[seq, :, valid:] = float("nan")
    out = poisoned(part_acc[:, :, 0])
    tri.merge_splits_triton(part_acc, part_max, part_sum, seq_lens, tokens_per_split, out)
    acc64, max64, sum64 = f64(part_acc, part_max, part_sum)
    expected = tri.merge_splits_reference(acc64, max64, sum64, seq_lens, tokens_per_split)
    assert_matches(out, expected, torch.float32)


# (cached prefix length, new tokens): no prefix, a prefix ending mid-block and on a block
# boundary, a one-token chunk, a chunk longer than a prefill tile.
PREFILL_SEQS = [(0, 7), (5, 12), (32, 1), (40, 70), (0, 1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_paged_prefill_matches_reference(shape: Shape, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(4)
    query_lens = [q for _, q in PREFILL_SEQS]
    seq_lens = [c + q for c, q in PREFILL_SEQS]
    meta, num_blocks = make_metadata(query_lens, seq_lens, shape.block_size, gen)
    meta.num_decodes = 0  # the one-token chunks here are prefills, not decodes
    k_cache, v_cache = make_cache(shape, num_blocks, dtype, gen)
    query = randn(meta.num_tokens, shape.num_heads, shape.head_dim, gen=gen, dtype=dtype)
    key = randn(meta.num_tokens, shape.num_kv_heads, shape.head_dim, gen=gen, dtype=dtype)
    value = randn(meta.num_tokens, shape.num_kv_heads, shape.head_dim, gen=gen, dtype=dtype)
    ref.write_kv_cache(key, value, k_cache, v_cache, meta.slot_mapping)
    scale = shape.head_dim**-0.5
    out = tri.paged_prefill_attention_triton(
        query,
        k_cache,
        v_cache,
        meta.block_tables,
        meta.seq_lens,
        meta.query_start_loc,
        meta.max_query_len,
        scale,
        out=poisoned(query),
    )
    q64, k64, v64, k_cache64, v_cache64 = f64(query, key, value, k_cache, v_cache)
    expected = ref.paged_attention(q64, k64, v64, k_cache64, v_cache64, meta, scale)
    assert_matches(out, expected, dtype)


# Decodes first, then a fresh prompt, a chunk over a cached prefix and a long chunk.
MIXED_QUERY_LENS = [1, 1, 1, 9, 16, 37]
MIXED_SEQ_LENS = [1, 49, 100, 9, 21, 37 + 64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backend_forward_matches_torch_backend(
    shape: Shape, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = torch.Generator().manual_seed(5)
    meta, num_blocks = make_metadata(MIXED_QUERY_LENS, MIXED_SEQ_LENS, shape.block_size, gen)
    assert meta.num_decodes == 3
    k_cache, v_cache = make_cache(shape, num_blocks, dtype, gen)
    heads = shape.num_heads + 2 * shape.num_kv_heads
    qkv = randn(meta.num_tokens, heads, shape.head_dim, gen=gen, dtype=dtype)
    query, key, value = qkv.split([shape.num_heads, shape.num_kv_heads, shape.num_kv_heads], 1)
    expected_k, expected_v = f64(k_cache, v_cache)
    scale = shape.head_dim**-0.5
    q64, k64, v64 = f64(query, key, value)
    expected = ref.TorchAttentionBackend().forward(
        q64, k64, v64, expected_k, expected_v, meta, scale
    )
    # Poison every buffer the backend allocates, so an output row no kernel writes stays NaN.
    monkeypatch.setattr(torch, "empty_like", poisoned_empty_like)
    out = tri.TritonAttentionBackend().forward(query, key, value, k_cache, v_cache, meta, scale)
    assert_matches(out, expected, dtype)
    assert torch.equal(k_cache, expected_k.to(dtype)) and torch.equal(v_cache, expected_v.to(dtype))


_empty_like = torch.empty_like


def poisoned_empty_like(like: torch.Tensor, **kwargs: object) -> torch.Tensor:
    return _empty_like(like, **kwargs).fill_(float("nan"))  # type: ignore[arg-type]


def test_engine_imports_without_triton() -> None:
    code = (
        "import sys\n"
        "sys.modules['triton'] = None\n"
        "import torch, engine, engine.attention.backend, engine.attention.torch_attention\n"
        "engine.attention.backend.get_attention_backend(torch.device('cpu'))\n"
        "try:\n"
        "    import engine.attention.triton_attention\n"
        "except ImportError as e:\n"
        "    assert 'pip install' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('engine.attention.triton_attention imported without triton')\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env=env, timeout=120)


@pytest.mark.slow
def test_kernels_compile_for_sm90() -> None:
    """The interpreter doesn't enforce GPU-only rules (tl.dot shapes, loop types): compile."""
    root = Path(__file__).resolve().parents[2]
    check = root / "benchmarks" / "gpu" / "compile_check.py"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, str(check), "--arch", "90", "--dtypes", "fp16"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
