"""Loads a model's weights into a LlamaForCausalLM: HF safetensors directories and GGUF files."""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.attention.backend import AttentionBackend
from engine.layers.cpu_linear import pack_linears
from engine.layers.w8a8_linear import quantize_linears
from engine.loader.weights_load_strategy import (
    adopt_as_stored,
    weights_load_strategy,
    without_weight_init,
)
from engine.model_config import ModelConfig
from engine.models.llama import LlamaForCausalLM
from engine.models.tp_layout import SKIP, Narrow
from engine.startup_stages import mark_stage
from pagedock.errors import ModelLoadError

if TYPE_CHECKING:
    from engine.distributed.tp_group import TPGroup

# Which slice of a checkpoint tensor this rank loads (TPLayout.narrow_for).
NarrowFor = Callable[[str], "Narrow | str | None"]


def read_model_config(path: Path) -> ModelConfig:
    """The architecture of a located model (the `weights_located` start-up stage: the engine
    reads it right after resolving the model onto this machine)."""
    if path.suffix == ".gguf":
        from engine.loader.gguf_loader import read_gguf_config

        config = read_gguf_config(path)
    else:
        config = ModelConfig.from_hf_dir(path)
    mark_stage("weights_located")
    return config


def iter_weights(
    path: Path, dtype: torch.dtype, weight_cache: bool = True, narrow_for: NarrowFor | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs of a GGUF file (through the weight cache when `weight_cache`) or
    of an HF directory's safetensors; with `narrow_for`, each tensor cut to this rank's slice.

    NOTE: safetensors are read slice by slice from the memory map, so a rank reads only its
    bytes; a GGUF tensor is dequantized (or read from the weight cache) whole, one tensor at a
    time, then cut: a quantized block format does not split along a row-parallel weight's
    columns."""
    if path.suffix != ".gguf":
        yield from iter_safetensors_weights(path, dtype, narrow_for)
        return
    from engine.loader.gguf_loader import iter_gguf_weights

    for name, tensor in iter_gguf_weights(path, dtype, weight_cache=weight_cache):
        cut = None if narrow_for is None else narrow_for(name)
        if cut == SKIP:
            continue
        if isinstance(cut, Narrow):
            tensor = tensor.narrow(cut.dim, cut.start, cut.end - cut.start).contiguous()
        yield name, tensor


def safetensors_files(path: Path) -> list[Path]:
    """The shards of an HF directory, by its index when there is one."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = sorted({path / name for name in weight_map.values()})
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{path}: no *.safetensors weights in the model directory")
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise ModelLoadError(f"{path}: shards named by the index are missing: {missing}")
    return files


def iter_safetensors_weights(
    path: Path, dtype: torch.dtype, narrow_for: NarrowFor | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors one at a time from memory-mapped shards (never the whole checkpoint in RAM); with
    `narrow_for`, only this rank's slice of each is read."""
    from safetensors import SafetensorError, safe_open

    for file in safetensors_files(path):
        try:
            with safe_open(str(file), framework="pt") as shard:
                for name in shard.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    cut = None if narrow_for is None else narrow_for(name)
                    if cut == SKIP:
                        continue
                    if isinstance(cut, Narrow):
                        index = (slice(None),) * cut.dim + (slice(cut.start, cut.end),)
                        yield name, shard.get_slice(name)[index].to(dtype)
                    else:
                        yield name, shard.get_tensor(name).to(dtype)
        except (SafetensorError, OSError) as e:
            raise ModelLoadError(f"{file}: cannot read safetensors ({e})") from e


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def load_model(
    path: Path,
    config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    backend: AttentionBackend,
    max_positions: int,
    *,
    onednn: bool = True,
    gemm_dtype: torch.dtype | None = None,
    weight_cache: bool = True,
    tp: TPGroup | None = None,
    quantization: str | None = None,
) -> LlamaForCausalLM:
    """Build the model without initialising weights (meta device), then fill it from the file.
    `onednn` packs CPU float32 linears for oneDNN, their weights in `gemm_dtype` (default: `dtype`);
    `quantization` (`w8a8`) quantizes most of them to int8 instead (EngineConfig's field);
    `weight_cache` reads and writes a GGUF's
    dequantized weights in the pagedock cache (EngineConfig's fields of those names). With `tp`,
    this rank's shard only. The weights load as weights_load_strategy.py's process-wide
    strategy says (`mmap`: parameters left uninitialised, weights used as stored in place)."""
    started = time.perf_counter()
    mapped = weights_load_strategy() == "mmap"
    with _default_dtype(dtype), torch.device("meta"), without_weight_init(mapped):
        model = LlamaForCausalLM(config, max_positions, backend, tp)
    model.to_empty(device=device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    model.rotary.build_tables(device)
    narrow_for = None if tp is None else model.layout.narrow_for
    weights = iter_weights(path, dtype, weight_cache, narrow_for)
    model.load_weights(adopt_as_stored(model, weights) if mapped else weights)
    model.eval()
    num_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if device.type == "cpu":
        if quantization == "w8a8":  # the layers it leaves are packed next
            quantize_linears(model, gemm_dtype=gemm_dtype or dtype)
        pack_linears(model, enabled=onednn, gemm_dtype=gemm_dtype or dtype)
    # ru_maxrss is in KiB on Linux: the process's peak resident size so far.
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mark_stage("weights_loaded")
    rank = "" if tp is None else f" (rank {tp.rank} of {tp.world_size})"
    gemms = f", GEMMs in {gemm_dtype}" if gemm_dtype not in (None, dtype) and onednn else ""
    gemms = f", {quantization} GEMMs" if quantization else gemms
    print(
        f"pagedock: loaded {path.name}{rank} in {time.perf_counter() - started:.1f}s "
        f"({num_bytes / 1e6:.0f} MB of weights, {dtype}{gemms}; peak RSS {peak_rss_mb:.0f} MB)",
        file=sys.stderr,
    )
    return model
