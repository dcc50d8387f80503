"""The identity of the weights an engine serves: a fingerprint of the model's files, cheap
enough to take at every start.

It salts the engine's block-hash root (`hash_root_name`), which the engine publishes
(`root_hash` in its KV event snapshot and its /health), so a router never counts one revision's
cached blocks for another's requests, and resumes a stream only on a replica whose weights are
the same (docs/router.md#rollouts). Identical weights get the same fingerprint wherever they were
copied (no paths, no times); different weights (another revision) get another.

NOTE: it reads each weight file's size and a fixed set of windows spread over it, not every byte:
a new revision of a model changes (nearly) every tensor, so the windows differ, and reading 1 MiB
per file keeps a 100 GB model's start as fast as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
# What of a model (or LoRA adapter) folder decides its outputs besides the tensors.
CONFIG_FILES = ("config.json", "adapter_config.json")
NUM_WINDOWS = 16
WINDOW_BYTES = 64 * 1024


def weights_fingerprint(model_path: Path) -> str:
    """16 hex digits that name the weights at `model_path` (one file, or a model folder)."""
    digest = hashlib.sha256()
    for name, path in _weight_files(model_path):
        size = path.stat().st_size
        digest.update(f"{name}\0{size}\0".encode())
        with path.open("rb") as file:
            for offset in window_offsets(size):
                file.seek(offset)
                digest.update(file.read(WINDOW_BYTES))
    return digest.hexdigest()[:16]


def hash_root_name(model_path: Path, dtype: object, kv_cache_dtype: object) -> str:
    """What every block hash of an engine descends from: the weights' identity and dtype, and the
    KV cache's dtype where it differs (a bf16 cache's blocks hold other K/V than a float32 one's,
    so the router must not count one replica's blocks as another's)."""
    # NOTE: the weights' fingerprint, not the model folder's name: copies of one revision
    # share their cache identity wherever they are, another revision (other weights) never
    # does, and the router resumes streams only between equal roots.
    name = f"w={weights_fingerprint(model_path)}:{dtype}"
    return name if kv_cache_dtype == dtype else f"{name}:kv={kv_cache_dtype}"


def window_offsets(size: int) -> list[int]:
    """Where the windows start: the whole file when it is small, else evenly spread, the first
    at 0 and the last ending at the file's end."""
    if size <= NUM_WINDOWS * WINDOW_BYTES:
        return list(range(0, size, WINDOW_BYTES))
    last = size - WINDOW_BYTES
    return [last * i // (NUM_WINDOWS - 1) for i in range(NUM_WINDOWS)]


def _weight_files(model_path: Path) -> list[tuple[str, Path]]:
    if model_path.is_file():
        return [(model_path.suffix, model_path)]  # the file's name is a copy's choice
    found = [
        p
        for p in model_path.rglob("*")
        if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name in CONFIG_FILES)
    ]
    return sorted((p.relative_to(model_path).as_posix(), p) for p in found)
