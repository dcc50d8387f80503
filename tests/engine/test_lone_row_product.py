"""A packed linear gives a row the same bits alone as beside other rows, so that a one-sequence
decode step and a speculative verification pass (several rows of that sequence) agree."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.layers import cpu_linear
from engine.layers.cpu_linear import PackedLinear, bf16_packing_available

# SmolLM2-135M's linear shapes (in, out): fused QKV, o_proj, fused gate/up, down_proj, LM head.
SMOLLM2_SHAPES = [(576, 960), (576, 576), (576, 3072), (1536, 576), (576, 49152)]
DTYPES = [torch.float32] + ([torch.bfloat16] if bf16_packing_available() else [])


@pytest.mark.parametrize("gemm_dtype", DTYPES)
@pytest.mark.parametrize(("in_features", "out_features"), SMOLLM2_SHAPES)
def test_a_lone_row_gets_the_bits_it_gets_in_a_batch(
    in_features: int, out_features: int, gemm_dtype: torch.dtype
) -> None:
    torch.manual_seed(in_features + out_features)
    linear = nn.Linear(in_features, out_features, bias=False)
    linear.weight.data.mul_(0.05)
    layer = PackedLinear(linear, gemm_dtype)
    rows = torch.randn(48 if out_features < 4096 else 8, in_features)
    with torch.no_grad():
        batch = layer(rows)
        for i in range(rows.shape[0]):
            assert torch.equal(layer(rows[i : i + 1]), batch[i : i + 1]), f"row {i}"


def test_a_lone_row_of_a_3d_input_keeps_its_shape() -> None:
    layer = PackedLinear(nn.Linear(16, 8), torch.float32)
    layer.pad_lone_row = True  # as where the probe found oneDNN's lone-row kernel rounds apart
    x = torch.randn(1, 1, 16)
    with torch.no_grad():
        out = layer(x)
        layer.pad_lone_row = False
        assert torch.equal(out, layer(x))
    assert out.shape == (1, 1, 8)


def test_the_probe_runs_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_linear, "_LONE_ROW_DIFFERS", {})
    calls = []
    real = PackedLinear._product

    def counted(self: PackedLinear, x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return real(self, x)

    monkeypatch.setattr(PackedLinear, "_product", counted)
    PackedLinear(nn.Linear(32, 16), torch.float32)
    probed = len(calls)
    PackedLinear(nn.Linear(32, 16), torch.float32)
    assert probed > 0 and len(calls) == probed
