"""--quantization w8a8 on the CPU: the int8 linear against the float one, the engine end to end on
the tiny model (greedy tokens and prompt logprobs near the unquantized engine's), tensor
parallelism, and the combinations it refuses with a ConfigError."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from engine import LLM, SamplingParams
from engine.config import EngineConfig
from engine.kernels import cpu_kernels
from engine.layers.cpu_linear import PackedLinear
from engine.layers.w8a8_linear import (
    KEPT_UNQUANTIZED,
    W8A8Linear,
    check_quantization,
    quantize_rows,
    w8a8_available,
)
from pagedock.errors import ConfigError
from tests.engine.conftest import make_prompts

pytestmark = pytest.mark.skipif(not w8a8_available(), reason="this torch has no oneDNN int8")
CPU = torch.device("cpu")
# Per-channel int8 weights and per-token int8 inputs: each product term is off by up to half a
# step of each, about 1 % of the largest output on random data (measured: 1.0-1.5 %).
RELATIVE_TOLERANCE = 0.03
LOGPROBS = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, prompt_logprobs=0)


@pytest.fixture
def kernels_switch() -> Iterator[None]:
    yield
    cpu_kernels.set_cpu_kernels_enabled(True)  # the switch is process-wide


def random_linear(in_features: int, out_features: int, bias: bool = False) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(in_features, out_features, bias=bias).requires_grad_(False)


@pytest.mark.usefixtures("kernels_switch")
@pytest.mark.parametrize("kernels", [True, False], ids=["cpp", "torch"])
@pytest.mark.parametrize("gemm_dtype", [torch.float32, torch.bfloat16])
def test_the_int8_linear_is_within_tolerance_of_the_float_one(
    kernels: bool, gemm_dtype: torch.dtype
) -> None:
    cpu_kernels.set_cpu_kernels_enabled(kernels)
    linear = random_linear(96, 80, bias=True)
    x = torch.randn(7, 96)
    x[3] = 0  # an all-zero row quantizes to zeros
    got = W8A8Linear(linear, gemm_dtype)(x.to(gemm_dtype))
    expected = linear(x)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    error = (got.float() - expected).abs().max() / expected.abs().max()
    assert error < RELATIVE_TOLERANCE


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cpp_and_torch_input_quantizations_agree(dtype: torch.dtype) -> None:
    x = (torch.randn(9, 200) * torch.linspace(0.01, 30, 9)[:, None]).to(dtype)
    x[4] = 0
    kernels = cpu_kernels.kernels_for(x, bf16_ok=True)
    if kernels is None:
        pytest.skip("no C++ CPU kernels here")
    codes, scales = kernels.quantize_rows_u8(x)
    cpu_kernels.set_cpu_kernels_enabled(False)
    try:
        torch_codes, torch_scales = quantize_rows(x)
    finally:
        cpu_kernels.set_cpu_kernels_enabled(True)
    assert codes.dtype == torch.uint8 and scales.shape == (9, 1)
    torch.testing.assert_close(scales, torch_scales)
    assert (codes.int() - torch_codes.int()).abs().max() <= 1  # a tie rounded the other way
    assert bool((codes[4] == 128).all())


def make_llm(model_dir: Path, **settings: Any) -> LLM:
    return LLM(model=str(model_dir), num_kv_blocks=32, max_model_len=128, **settings)


def test_the_engine_quantizes_all_but_the_kept_layers(tiny_model_dir: Path) -> None:
    model = make_llm(tiny_model_dir, quantization="w8a8").engine.model
    kinds = {name.rpartition(".")[2]: type(m) for name, m in model.named_modules() if name}
    assert kinds["qkv_proj"] is kinds["o_proj"] is kinds["gate_up_proj"] is W8A8Linear
    assert all(kinds[name] is PackedLinear for name in KEPT_UNQUANTIZED)


def prompt_logprobs(llm: LLM, prompts: list[list[int]]) -> tuple[torch.Tensor, list[list[int]]]:
    """Every prompt token's logprob after the first, and each request's greedy tokens."""
    outputs = llm.generate(prompts, LOGPROBS, use_tqdm=False)
    values = [
        entry[token].logprob
        for prompt, out in zip(prompts, outputs, strict=True)
        for token, entry in zip(prompt[1:], out.prompt_logprobs[1:], strict=True)
    ]
    return torch.tensor(values), [list(out.token_ids) for out in outputs]


def test_the_quantized_engine_stays_near_the_float_one(tiny_model_dir: Path) -> None:
    prompts = make_prompts(6, 8, 40)
    reference, ref_tokens = prompt_logprobs(make_llm(tiny_model_dir), prompts)
    got, tokens = prompt_logprobs(make_llm(tiny_model_dir, quantization="w8a8"), prompts)
    gaps = (got - reference).abs()
    # Measured on this model (its logits are sharper than a trained model's): mean 0.057,
    # largest 0.22 nats.
    assert gaps.mean() < 0.12 and gaps.max() < 0.6
    assert sum(t[0] == r[0] for t, r in zip(tokens, ref_tokens, strict=True)) >= 5


@pytest.mark.timeout(600)
def test_tensor_parallel_ranks_quantize_their_own_shards(tiny_model_dir: Path) -> None:
    prompts = make_prompts(3, 8, 30)
    one, _ = prompt_logprobs(make_llm(tiny_model_dir, quantization="w8a8"), prompts)
    llm = make_llm(tiny_model_dir, quantization="w8a8", tensor_parallel_size=2)
    try:
        two, _ = prompt_logprobs(llm, prompts)
    finally:
        llm.shutdown()
    # o_proj's input is split over the ranks, each slice quantized against its own largest value.
    # Measured: mean 0.031, largest 0.13 nats from one rank's.
    assert (two - one).abs().mean() < 0.08


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"quantization": "int4"}, "quantization must be one of"),
        ({"quantization": "w8a8", "onednn": False}, "needs onednn on"),
        ({"quantization": "w8a8", "enable_lora": True}, "enable_lora does not work"),
    ],
)
def test_unsupported_settings_are_refused_by_name(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**settings)


def test_quantization_needs_float32_activations_on_the_cpu() -> None:
    check_quantization(None, torch.bfloat16, torch.device("cuda"))  # off: nothing to check
    check_quantization("w8a8", torch.float32, CPU)
    with pytest.raises(ConfigError, match="float32 activations"):
        check_quantization("w8a8", torch.bfloat16, CPU)
    with pytest.raises(ConfigError, match="on cuda"):
        check_quantization("w8a8", torch.float32, torch.device("cuda"))


def test_a_bfloat16_engine_refuses_quantization_at_start(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="float32 activations"):
        make_llm(tiny_model_dir, quantization="w8a8", dtype="bfloat16")
