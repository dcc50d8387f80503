"""Loads a model's weights into a LlamaForCausalLM: HF safetensors directories and GGUF files."""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from engine.attention.backend import AttentionBackend
from engine.errors import ModelLoadError
from engine.layers.cpu_linear import pack_linears
from engine.models.llama import LlamaForCausalLM
from engine.models.model_config import ModelConfig


def read_model_config(path: Path) -> ModelConfig:
    if path.suffix == ".gguf":
        from engine.loader.gguf_loader import read_gguf_config

        return read_gguf_config(path)
    return ModelConfig.from_hf_dir(path)


def iter_weights(
    path: Path, dtype: torch.dtype, weight_cache: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs of a GGUF file (through the weight cache when `weight_cache`) or
    of an HF directory's safetensors."""
    if path.suffix == ".gguf":
        from engine.loader.gguf_loader import iter_gguf_weights

        yield from iter_gguf_weights(path, dtype, weight_cache=weight_cache)
    else:
        yield from iter_safetensors_weights(path, dtype)


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


def iter_safetensors_weights(path: Path, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors one at a time from memory-mapped shards (never the whole checkpoint in RAM)."""
    from safetensors import SafetensorError, safe_open

    for file in safetensors_files(path):
        try:
            with safe_open(str(file), framework="pt") as shard:
                for name in shard.keys():  # noqa: SIM118 (safe_open is not a mapping)
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
    weight_cache: bool = True,
) -> LlamaForCausalLM:
    """Build the model without initialising weights (meta device), then fill it from the file.
    `onednn` packs CPU float32 linears for oneDNN; `weight_cache` reads and writes a GGUF's
    dequantized weights in the pagedock cache (EngineConfig's fields of those names)."""
    started = time.perf_counter()
    with _default_dtype(dtype), torch.device("meta"):
        model = LlamaForCausalLM(config, max_positions, backend)
    model.to_empty(device=device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    model.rotary.build_tables(device)
    model.load_weights(iter_weights(path, dtype, weight_cache))
    model.eval()
    num_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if device.type == "cpu":
        pack_linears(model, enabled=onednn)
    # ru_maxrss is in KiB on Linux: the process's peak resident size so far.
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"pagedock: loaded {path.name} in {time.perf_counter() - started:.1f}s "
        f"({num_bytes / 1e6:.0f} MB of weights, {dtype}; peak RSS {peak_rss_mb:.0f} MB)",
        file=sys.stderr,
    )
    return model
