"""The worker's side of LoRA: every served adapter's weights packed on the host, the max_loras
slots' weights on the device, and the step's mapping that the LoRA layers read (vLLM's
LoRAModelManager and PunicaWrapper, in one small class).

The scheduler decides which adapter sits in which slot (engine/lora/slots.py); a step's requests
carry their slot and adapter, and `activate` loads an adapter into a slot whose content differs.
On the CPU a load is a reference to the host tensors; on a GPU it is one copy to the device, so
device memory holds at most max_loras adapters. Adapters loaded at run time join the host set
(`add_adapter`); an unloaded one leaves it, and its slot, after its last request
(`remove_adapter`, engine/runtime/lora_adapters.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine.lora.adapter import LoRAAdapter, LoRAWeights
from engine.lora.lora_linear import ModuleKey
from engine.lora.lora_mapping import LoRAMapping
from engine.lora.stacked_lora import (
    StackedLoRA,
    add_grouped,
    add_segments,
    compute_dtype,
    stack_slots,
)

# Where each projection an adapter may target lives in the model: (module, first output column,
# end column), e.g. "k_proj" -> ("self_attn.qkv_proj", 256, 320) in a fused QKV projection.
Placement = Mapping[str, tuple[str, int, int]]


@dataclass(frozen=True)
class LoRAPart:
    """One targeted part of a projection: its B, the columns of the rank block it reads from the
    shrink product, and the output columns it adds to."""

    column_start: int
    column_end: int
    rank_start: int
    rank_end: int
    lora_b: torch.Tensor  # [column_end - column_start, rank_end - rank_start], scaled


@dataclass(frozen=True)
class PackedLoRA:
    """One adapter's LoRA on one module: the A matrices of its parts stacked (one shrink GEMM),
    and the parts."""

    shrink: torch.Tensor  # [sum of the parts' ranks, in_features]
    parts: tuple[LoRAPart, ...]

    def to(self, device: torch.device) -> PackedLoRA:
        parts = tuple(
            LoRAPart(p.column_start, p.column_end, p.rank_start, p.rank_end, p.lora_b.to(device))
            for p in self.parts
        )
        return PackedLoRA(self.shrink.to(device), parts)


def pack_adapter(adapter: LoRAAdapter, placement: Placement) -> dict[ModuleKey, PackedLoRA]:
    """The adapter's weights grouped by the module that applies them."""
    grouped: dict[ModuleKey, list[tuple[int, int, LoRAWeights]]] = {}
    for (layer, proj), weights in sorted(adapter.weights.items()):
        module, start, end = placement[proj]
        grouped.setdefault((layer, module), []).append((start, end, weights))
    packed: dict[ModuleKey, PackedLoRA] = {}
    for key, items in grouped.items():
        parts: list[LoRAPart] = []
        rank = 0
        for start, end, weights in items:
            r = weights.lora_a.shape[0]
            parts.append(LoRAPart(start, end, rank, rank + r, weights.lora_b))
            rank += r
        shrink = torch.cat([weights.lora_a for _, _, weights in items]).contiguous()
        packed[key] = PackedLoRA(shrink, tuple(parts))
    return packed


class LoRAManager:
    def __init__(
        self,
        adapters: Mapping[str, LoRAAdapter],
        placement: Placement,
        max_loras: int,
        device: torch.device,
    ) -> None:
        self.adapters = dict(adapters)
        self.placement = placement
        self._host = {name: pack_adapter(a, placement) for name, a in self.adapters.items()}
        self.device = device
        self.slot_names: list[str | None] = [None] * max_loras
        self.slot_weights: list[dict[ModuleKey, PackedLoRA]] = [{} for _ in range(max_loras)]
        # The running step's mapping (None between steps and in steps without adapter rows).
        self.mapping: LoRAMapping | None = None
        self.num_slot_loads = 0
        # Every slot's weights stacked per module (engine/lora/stacked_lora.py), rebuilt at the
        # first step after a slot's content changed.
        self._stacked: dict[ModuleKey, StackedLoRA] | None = None
        self._stacked_dtype: torch.dtype | None = None

    def activate(self, slot: int, name: str) -> None:
        """Make `slot` hold `name`'s weights; nothing to do when it already does."""
        if self.slot_names[slot] == name:
            return
        host = self._host.get(name)
        if host is None:
            raise ValueError(f"LoRA adapter {name!r} is not loaded in this engine")
        self.slot_weights[slot] = {key: packed.to(self.device) for key, packed in host.items()}
        self.slot_names[slot] = name
        self.num_slot_loads += 1
        self._stacked = None

    def add_adapter(self, adapter: LoRAAdapter) -> None:
        """Hold a newly loaded adapter's weights on the host (loaded into a slot on first use)."""
        if adapter.name in self.adapters:
            raise ValueError(f"LoRA adapter {adapter.name!r} is already loaded in this engine")
        self._host[adapter.name] = pack_adapter(adapter, self.placement)
        self.adapters[adapter.name] = adapter

    def remove_adapter(self, name: str) -> None:
        """Release an unloaded adapter's weights: on the host, and in any slot that holds them
        (its last request has finished, so no step reads them)."""
        self.adapters.pop(name, None)
        self._host.pop(name, None)
        for slot, held in enumerate(self.slot_names):
            if held == name:
                self.slot_names[slot] = None
                self.slot_weights[slot] = {}
                self._stacked = None

    @contextmanager
    def step(self, mapping: LoRAMapping) -> Iterator[None]:
        """The LoRA layers apply `mapping` inside this block (one forward pass)."""
        self.mapping = mapping
        try:
            yield
        finally:
            self.mapping = None

    def apply(self, out: torch.Tensor, x: torch.Tensor, key: ModuleKey) -> torch.Tensor:
        """`out` (the base product of `x` in module `key`) plus the step's deltas: grouped when
        the step's adapter rows pad into equal groups cheaply, else by adapter segment."""
        mapping = self.mapping
        assert mapping is not None
        stacked = self._stacked_weights(compute_dtype(out.dtype, out.device)).get(key)
        if stacked is None:
            return out  # no adapter in a slot targets this module
        if mapping.groups is not None:
            return add_grouped(out, x, stacked, mapping.groups)
        return add_segments(out, x, stacked, mapping.segments)

    def _stacked_weights(self, dtype: torch.dtype) -> dict[ModuleKey, StackedLoRA]:
        if self._stacked is None or self._stacked_dtype != dtype:
            keys = {key for weights in self.slot_weights for key in weights}
            stacked = {k: stack_slots([w.get(k) for w in self.slot_weights], dtype) for k in keys}
            self._stacked = {k: v for k, v in stacked.items() if v is not None}
            self._stacked_dtype = dtype
        return self._stacked
