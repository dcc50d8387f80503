"""The batched LoRA delta of one projection: per adapter segment, the rows gathered, multiplied by
the stacked A and each part's B, and scatter-added into that part's columns of a fused output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from engine.lora.adapter import LoRAAdapter, LoRAWeights
from engine.lora.adapter_config import AdapterConfig
from engine.lora.lora_linear import LoRALinear
from engine.lora.lora_manager import LoRAManager
from engine.lora.lora_mapping import LoRAMapping

IN, Q, KV = 8, 6, 4  # a fused projection: q (6 columns), k (4), v (4)
PLACEMENT = {
    "q_proj": ("qkv", 0, Q),
    "k_proj": ("qkv", Q, Q + KV),
    "v_proj": ("qkv", Q + KV, Q + 2 * KV),
}
WIDTHS = {"q_proj": Q, "k_proj": KV, "v_proj": KV}


def adapter(name: str, rank: int, projections: tuple[str, ...], seed: int) -> LoRAAdapter:
    gen = torch.Generator().manual_seed(seed)
    weights = {
        (0, p): LoRAWeights(
            torch.randn(rank, IN, generator=gen), torch.randn(WIDTHS[p], rank, generator=gen)
        )
        for p in projections
    }
    return LoRAAdapter(name, Path("/nowhere"), AdapterConfig(rank, rank, False, None), weights)


def reference(
    base: nn.Linear, x: torch.Tensor, slots: list[int], adapters: list[LoRAAdapter]
) -> torch.Tensor:
    """Row by row, part by part: what the segmented computation must equal."""
    out = base(x).clone()
    for row, slot in enumerate(slots):
        if slot < 0:
            continue
        for (_, proj), w in adapters[slot].weights.items():
            _, start, end = PLACEMENT[proj]
            out[row, start:end] += w.lora_b @ (w.lora_a @ x[row])
    return out


def test_mixed_rows_get_each_adapters_delta_in_its_parts_columns_only() -> None:
    torch.manual_seed(0)
    adapters = [adapter("qv", 2, ("q_proj", "v_proj"), 1), adapter("k", 3, ("k_proj",), 2)]
    manager = LoRAManager({a.name: a for a in adapters}, PLACEMENT, 2, torch.device("cpu"))
    for slot, a in enumerate(adapters):
        manager.activate(slot, a.name)
    base = nn.Linear(IN, Q + 2 * KV)
    layer = LoRALinear(base, (0, "qkv"), manager)
    x = torch.randn(6, IN)
    slots = [-1, 0, 1, 0, -1, 1]
    mapping = LoRAMapping.from_token_slots(np.array(slots), torch.device("cpu"))
    assert mapping is not None and [s.slot for s in mapping.segments] == [0, 1]
    with torch.no_grad(), manager.step(mapping):
        got = layer(x)
    with torch.no_grad():
        torch.testing.assert_close(got, reference(base, x, slots, adapters))
        assert torch.equal(layer(x), base(x))  # outside a step: the base product alone


def test_a_step_of_one_adapter_needs_no_gather() -> None:
    a = adapter("qv", 2, ("q_proj", "v_proj"), 3)
    manager = LoRAManager({"qv": a}, PLACEMENT, 1, torch.device("cpu"))
    manager.activate(0, "qv")
    mapping = LoRAMapping.from_token_slots(np.zeros(5, dtype=np.int64), torch.device("cpu"))
    assert mapping is not None and mapping.segments[0].rows is None
    base = nn.Linear(IN, Q + 2 * KV)
    x = torch.randn(5, IN)
    with torch.no_grad(), manager.step(mapping):
        got = LoRALinear(base, (0, "qkv"), manager)(x)
    with torch.no_grad():
        torch.testing.assert_close(got, reference(base, x, [0] * 5, [a]))


def test_a_step_without_adapter_rows_has_no_mapping() -> None:
    assert LoRAMapping.from_token_slots(np.full(4, -1), torch.device("cpu")) is None


def test_a_slot_is_loaded_only_when_its_adapter_changes() -> None:
    adapters = {n: adapter(n, 2, ("q_proj",), i) for i, n in enumerate(("a", "b"))}
    manager = LoRAManager(adapters, PLACEMENT, 1, torch.device("cpu"))
    for name in ("a", "a", "b", "b", "a"):
        manager.activate(0, name)
    assert manager.num_slot_loads == 3 and manager.slot_names == ["a"]
