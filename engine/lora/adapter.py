"""One LoRA adapter in PEFT's format, read into plain tensors and checked against the base model.

    adapter_config.json         r, lora_alpha, use_rslora, target_modules (adapter_config.py)
    adapter_model.safetensors   base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight
                                [r, in] and ...lora_B.weight [out, r], per targeted projection

in a local directory, or in a Hub repo (hf://org/name[@revision]) fetched into the hub's cache.

The scaling (lora_alpha / r, or / sqrt(r) with rsLoRA) is folded into B once here, so the forward
pass computes x A^T B^T. The base model's weights are never touched (no merging).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.lora.adapter_config import LORA_TARGETS, AdapterConfig, read_adapter_config
from pagedock.errors import ModelLoadError
from pagedock.models.hub import HF_SCHEME, fetch_hf_adapter

WEIGHTS_FILE = "adapter_model.safetensors"
# PEFT's tensor names for a llama (with or without the CausalLM wrapper, with or without the
# adapter's name before ".weight").
_KEY = re.compile(
    r"^(?:base_model\.model\.)?(?:model\.)?layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)"
    r"\.lora_([AB])(?:\.[\w-]+)?\.weight$"
)


@dataclass(frozen=True)
class LoRAWeights:
    """One projection's pair: lora_a [r, in], lora_b [out, r] with the scaling folded in."""

    lora_a: torch.Tensor
    lora_b: torch.Tensor


@dataclass(frozen=True)
class LoRAAdapter:
    """An adapter's weights by (layer index, projection name), e.g. (0, "q_proj")."""

    name: str
    path: Path
    config: AdapterConfig
    weights: dict[tuple[int, str], LoRAWeights]

    @property
    def target_modules(self) -> list[str]:
        """The projections it changes (in at least one layer)."""
        return sorted({proj for _, proj in self.weights})


def load_adapter(
    name: str,
    source: str,
    *,
    max_rank: int,
    shapes: Mapping[str, tuple[int, int]],
    num_layers: int,
    dtype: torch.dtype,
) -> LoRAAdapter:
    """Read and check the adapter `name` at `source` (a local PEFT directory or an hf:// repo) for
    a base model whose projections have `shapes` ({name: (out_features, in_features)}) in
    `num_layers` layers. ModelLoadError names the file and the problem; ConfigError a rank above
    `max_rank`."""
    directory = adapter_directory(name, source)
    config = read_adapter_config(name, directory, max_rank)
    tensors = _read_tensors(name, directory / WEIGHTS_FILE)
    pairs = _pair_tensors(name, tensors, num_layers)
    weights: dict[tuple[int, str], LoRAWeights] = {}
    for (layer, proj), (lora_a, lora_b) in pairs.items():
        _check_shapes(name, layer, proj, lora_a, lora_b, config.rank, shapes[proj])
        lora_b = (lora_b.float() * config.scaling).to(dtype)
        weights[layer, proj] = LoRAWeights(lora_a.to(dtype).contiguous(), lora_b.contiguous())
    return LoRAAdapter(name, directory, config, weights)


def adapter_directory(name: str, source: str) -> Path:
    """The local directory `source` names: a directory, or an hf://org/name[@revision] repo's
    snapshot in the hub's cache (fetched first when not there); ModelLoadError for neither."""
    if source.startswith(HF_SCHEME):
        return fetch_hf_adapter(name, source)
    directory = Path(source).expanduser()
    if not directory.is_dir():
        raise ModelLoadError(f"LoRA adapter {name!r}: {source} is not a directory")
    return directory


def _read_tensors(name: str, file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        other = " (only safetensors are read, not adapter_model.bin)"
        found = other if (file.parent / "adapter_model.bin").exists() else ""
        raise ModelLoadError(f"LoRA adapter {name!r}: no {WEIGHTS_FILE} in {file.parent}{found}")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError) as e:
        raise ModelLoadError(f"LoRA adapter {name!r}: cannot read {file} ({e})") from e


def _pair_tensors(
    name: str, tensors: dict[str, torch.Tensor], num_layers: int
) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]:
    """(A, B) by (layer, projection); ModelLoadError for a tensor pagedock cannot apply."""
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None:
            raise ModelLoadError(
                f"LoRA adapter {name!r}: tensor {key!r} is not a LoRA A/B weight of a llama "
                f"projection ({', '.join(LORA_TARGETS)}); pagedock cannot apply it"
            )
        layer, proj, half = int(match.group(1)), match.group(2), match.group(3)
        if proj not in LORA_TARGETS:
            raise ModelLoadError(
                f"LoRA adapter {name!r} targets a module this model lacks: {proj!r} ({key})"
            )
        if layer >= num_layers:
            raise ModelLoadError(
                f"LoRA adapter {name!r}: {key} is for layer {layer}, but the base model has "
                f"{num_layers} layers (an adapter for another model?)"
            )
        halves.setdefault((layer, proj), {})[half] = tensor
    if not halves:
        raise ModelLoadError(f"LoRA adapter {name!r}: {WEIGHTS_FILE} holds no LoRA weights")
    unpaired = sorted(f"layers.{k[0]}.{k[1]}" for k, v in halves.items() if len(v) != 2)
    if unpaired:
        raise ModelLoadError(f"LoRA adapter {name!r}: lora_A or lora_B missing for {unpaired}")
    return {key: (v["A"], v["B"]) for key, v in halves.items()}


def _check_shapes(
    name: str,
    layer: int,
    proj: str,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    rank: int,
    shape: tuple[int, int],
) -> None:
    out_features, in_features = shape
    for half, got, want in (
        ("lora_A", tuple(lora_a.shape), (rank, in_features)),
        ("lora_B", tuple(lora_b.shape), (out_features, rank)),
    ):
        if got != want:
            raise ModelLoadError(
                f"LoRA adapter {name!r}: layers.{layer}.{proj}.{half} has shape {got}, but "
                f"rank {rank} on the base model's {proj} ({in_features} -> {out_features}) "
                f"needs {want} (an adapter for another model?)"
            )
