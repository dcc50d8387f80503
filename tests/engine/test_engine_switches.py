"""EngineConfig's CPU switches (onednn, cpu_gemm_dtype, cpu_kernels) reach the model the engine
builds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from engine.device import cpu_has_native_bf16
from engine.kernels import cpu_kernels
from engine.layers.cpu_linear import PackedLinear, onednn_available


@pytest.fixture
def restore_cpu_kernels() -> Iterator[None]:
    yield
    cpu_kernels.set_cpu_kernels_enabled(True)  # the switch is process-wide


def make_llm(model_dir: Path, **switches: Any) -> LLM:
    return LLM(model=str(model_dir), num_kv_blocks=16, max_model_len=128, **switches)


def packed_layers(llm: LLM) -> int:
    return sum(isinstance(m, PackedLinear) for m in llm.engine.model.modules())


def test_onednn_off_leaves_linears_unpacked(tiny_model_dir: Path) -> None:
    assert packed_layers(make_llm(tiny_model_dir, onednn=False)) == 0


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
def test_onednn_on_packs_the_linears(tiny_model_dir: Path) -> None:
    assert packed_layers(make_llm(tiny_model_dir)) > 0


@pytest.mark.usefixtures("restore_cpu_kernels")
def test_cpu_kernels_off_runs_pure_torch(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir, cpu_kernels=False)
    assert cpu_kernels.load_cpu_kernels() is None
    (out,) = llm.generate(
        [[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False
    )
    assert len(out.token_ids) == 3


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
@pytest.mark.parametrize("setting", ["float32", "bfloat16"])
def test_cpu_gemm_dtype_sets_the_packed_weights_dtype(tiny_model_dir: Path, setting: str) -> None:
    if setting == "bfloat16" and not cpu_has_native_bf16():
        pytest.skip("this CPU has no native bf16")
    layers = [
        m
        for m in make_llm(tiny_model_dir, cpu_gemm_dtype=setting).engine.model.modules()
        if isinstance(m, PackedLinear)
    ]
    assert layers and {str(m.packed_weight.dtype) for m in layers} == {f"torch.{setting}"}


def test_an_explicit_float32_dtype_keeps_every_gemm_in_float32(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir, dtype="float32")
    assert all(
        m.gemm_dtype == torch.float32
        for m in llm.engine.model.modules()
        if isinstance(m, PackedLinear)
    )
