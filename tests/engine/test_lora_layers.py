"""The batched LoRA delta of one projection, on both paths (engine/lora/stacked_lora.py): the
adapter rows in padded groups multiplied by every slot's A and B in two batched GEMMs, and per
adapter segment the rows multiplied by the adapter's A and dense B run by run; either way each part
adds to its own columns of a fused output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from engine.lora import lora_mapping
from engine.lora.adapter import LoRAAdapter, LoRAWeights
from engine.lora.adapter_config import AdapterConfig
from engine.lora.lora_linear import LoRALinear
from engine.lora.lora_manager import LoRAManager
from engine.lora.lora_mapping import LoRAMapping, contiguous_runs

IN, Q, KV = 8, 6, 4  # a fused projection: q (6 columns), k (4), v (4)
PLACEMENT = {
    "q_proj": ("qkv", 0, Q),
    "k_proj": ("qkv", Q, Q + KV),
    "v_proj": ("qkv", Q + KV, Q + 2 * KV),
}
WIDTHS = {"q_proj": Q, "k_proj": KV, "v_proj": KV}
PROJS = ("q_proj", "k_proj", "v_proj")


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


@pytest.fixture(params=["grouped", "segmented"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which path the manager takes: grouped whatever the padding, or segmented when forced."""
    monkeypatch.setattr(lora_mapping, "GROUPED_MAX_PADDING", PADDING[str(request.param)])
    return str(request.param)


# GROUPED_MAX_PADDING that makes every step grouped, or none.
PADDING = {"grouped": 1000.0, "segmented": -1.0}


def test_mixed_rows_get_each_adapters_delta_in_its_parts_columns_only(path: str) -> None:
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
    assert (mapping.groups is not None) == (path == "grouped")
    with torch.no_grad(), manager.step(mapping):
        got = layer(x)
    with torch.no_grad():
        torch.testing.assert_close(got, reference(base, x, slots, adapters))
        assert torch.equal(layer(x), base(x))  # outside a step: the base product alone


def test_a_step_of_one_adapter_needs_no_gather(path: str) -> None:
    a = adapter("qv", 2, ("q_proj", "v_proj"), 3)
    manager = LoRAManager({"qv": a}, PLACEMENT, 1, torch.device("cpu"))
    manager.activate(0, "qv")
    mapping = LoRAMapping.from_token_slots(np.zeros(5, dtype=np.int64), torch.device("cpu"))
    assert mapping is not None and mapping.segments[0].rows is None and mapping.groups is None
    base = nn.Linear(IN, Q + 2 * KV)
    x = torch.randn(5, IN)
    with torch.no_grad(), manager.step(mapping):
        got = LoRALinear(base, (0, "qkv"), manager)(x)
    with torch.no_grad():
        torch.testing.assert_close(got, reference(base, x, [0] * 5, [a]))


def test_both_paths_add_the_same_deltas_on_a_large_mixed_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapters = [adapter(n, r, ps, i) for i, (n, r, ps) in enumerate(ADAPTER_SPECS)]
    manager = LoRAManager({a.name: a for a in adapters}, PLACEMENT, 3, torch.device("cpu"))
    for slot, a in enumerate(adapters):
        manager.activate(slot, a.name)
    base = nn.Linear(IN, Q + 2 * KV)
    layer = LoRALinear(base, (0, "qkv"), manager)
    x = torch.randn(300, IN)
    slots = np.random.default_rng(0).integers(-1, 3, size=300)
    outputs = []
    for path in ("grouped", "segmented"):
        monkeypatch.setattr(lora_mapping, "GROUPED_MAX_PADDING", PADDING[path])
        mapping = LoRAMapping.from_token_slots(slots, torch.device("cpu"))
        assert mapping is not None and (mapping.groups is not None) == (path == "grouped")
        with torch.no_grad(), manager.step(mapping):
            outputs.append(layer(x))
    torch.testing.assert_close(outputs[0], outputs[1])
    with torch.no_grad():
        torch.testing.assert_close(outputs[0], reference(base, x, slots.tolist(), adapters))


ADAPTER_SPECS = [("qv", 2, ("q_proj", "v_proj")), ("k", 3, ("k_proj",)), ("all", 4, PROJS)]


def test_groups_of_unequal_size_are_padded_and_the_padding_adds_nothing(path: str) -> None:
    """Slots 0 and 2 of three in the step, 3 rows against 1: the grouped path multiplies only the
    step's slots and zeroes the padded positions (which repeat a real row)."""
    adapters = [adapter(n, r, ps, i) for i, (n, r, ps) in enumerate(ADAPTER_SPECS)]
    manager = LoRAManager({a.name: a for a in adapters}, PLACEMENT, 3, torch.device("cpu"))
    for slot, a in enumerate(adapters):
        manager.activate(slot, a.name)
    base = nn.Linear(IN, Q + 2 * KV)
    x = torch.randn(5, IN)
    slots = [0, 0, 0, 2, -1]
    mapping = LoRAMapping.from_token_slots(np.array(slots), torch.device("cpu"))
    assert mapping is not None
    if path == "grouped":
        assert mapping.groups is not None and mapping.groups.slots == (0, 2)
        assert mapping.groups.size == 3 and int(mapping.groups.padding.sum()) == 2
    with torch.no_grad(), manager.step(mapping):
        got = LoRALinear(base, (0, "qkv"), manager)(x)
    with torch.no_grad():
        torch.testing.assert_close(got, reference(base, x, slots, adapters))


def test_padding_beyond_the_limit_takes_the_segmented_path() -> None:
    """A long prefill of one adapter beside one decode of another: padding the decode's group to
    the prefill's would more than double the arithmetic."""
    slots = np.array([1] + [0] * 40)
    mapping = LoRAMapping.from_token_slots(slots, torch.device("cpu"))
    assert mapping is not None and mapping.groups is None
    balanced = LoRAMapping.from_token_slots(np.array([0, 0, 1, 1, 1, -1]), torch.device("cpu"))
    assert balanced is not None and balanced.groups is not None


def test_a_segments_rows_are_kept_as_contiguous_runs() -> None:
    assert contiguous_runs(np.array([2, 3, 4, 7, 8])) == ((2, 5), (7, 9))
    slots = np.array([-1, 0, 0, 1, 1, -1, 0, 0, 0, 1])  # decodes, then prefills, grouped by slot
    mapping = LoRAMapping.from_token_slots(slots, torch.device("cpu"))
    assert mapping is not None
    assert [s.runs for s in mapping.segments] == [((1, 3), (6, 9)), ((3, 5), (9, 10))]


def test_a_step_without_adapter_rows_has_no_mapping() -> None:
    assert LoRAMapping.from_token_slots(np.full(4, -1), torch.device("cpu")) is None


def test_a_slot_is_loaded_only_when_its_adapter_changes() -> None:
    adapters = {n: adapter(n, 2, ("q_proj",), i) for i, n in enumerate(("a", "b"))}
    manager = LoRAManager(adapters, PLACEMENT, 1, torch.device("cpu"))
    for name in ("a", "a", "b", "b", "a"):
        manager.activate(0, name)
    assert manager.num_slot_loads == 3 and manager.slot_names == ["a"]
