"""bf16 GEMMs on CPUs that multiply bf16 natively: chosen only by `auto`, refused where emulated,
and close to float32."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine import device
from engine.device import pick_cpu_gemm_dtype
from engine.layers.cpu_linear import PackedLinear, bf16_packing_available
from pagedock.errors import ConfigError

CPU = torch.device("cpu")


@pytest.fixture
def native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: True)


@pytest.fixture
def emulated_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: False)


@pytest.mark.usefixtures("native_bf16")
def test_auto_multiplies_in_bf16_where_the_cpu_has_native_bf16() -> None:
    assert pick_cpu_gemm_dtype("auto", "auto", torch.float32, CPU) == torch.bfloat16


@pytest.mark.usefixtures("emulated_bf16")
def test_auto_stays_float32_where_bf16_would_be_emulated() -> None:
    assert pick_cpu_gemm_dtype("auto", "auto", torch.float32, CPU) == torch.float32


@pytest.mark.usefixtures("native_bf16")
def test_an_explicit_float32_dtype_is_float32_throughout() -> None:
    assert pick_cpu_gemm_dtype("auto", "float32", torch.float32, CPU) == torch.float32


@pytest.mark.usefixtures("native_bf16")
def test_gpus_and_bf16_engines_multiply_in_their_own_dtype() -> None:
    assert (
        pick_cpu_gemm_dtype("auto", "auto", torch.bfloat16, torch.device("cuda")) == torch.bfloat16
    )
    assert pick_cpu_gemm_dtype("float32", "bfloat16", torch.bfloat16, CPU) == torch.bfloat16


@pytest.mark.usefixtures("emulated_bf16")
def test_asking_for_bf16_gemms_on_a_cpu_without_it_names_the_missing_flags() -> None:
    with pytest.raises(ConfigError, match="avx512_bf16 or amx_bf16"):
        pick_cpu_gemm_dtype("bfloat16", "auto", torch.float32, CPU)


@pytest.mark.skipif(
    not bf16_packing_available(), reason="this torch or CPU can't pack bf16 weights"
)
@pytest.mark.parametrize("batch", [1, 7, 64, 300])
def test_a_bf16_packed_linear_takes_float32_or_bf16_and_returns_a_bf16_product_close_to_float32(
    batch: int,
) -> None:
    torch.manual_seed(batch)
    linear = nn.Linear(576, 960, bias=True)
    x = torch.randn(batch, 576)
    packed = PackedLinear(linear, torch.bfloat16)
    y = packed(x)
    expected = linear(x)
    assert y.dtype == torch.bfloat16 and y.shape == expected.shape
    assert torch.equal(packed(x.to(torch.bfloat16)), y)  # the cast is the only difference
    y = y.float()
    # bf16 keeps 8 bits of mantissa: the error grows like sqrt(K) * 2^-8 of a typical product.
    assert (y - expected).abs().max() < 0.05 * expected.abs().max()
