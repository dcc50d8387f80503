"""A cache of a GGUF's dequantized weights, as one safetensors file per (GGUF, dtype).

Dequantizing block-quantized GGUF tensors costs seconds per start; reading the same values back
from a memory-mapped safetensors file costs a copy. The first load streams each weight into the
cache file while the model takes it; later loads read the file instead.

    <cache_dir>/weights/<stem>.<path digest>.<dtype>.<state digest>.safetensors

The state digest covers the GGUF's size and mtime and the cache format version, so an edited or
replaced GGUF, or a newer pagedock layout, never reads an old file; writing a new one removes
the older ones of the same GGUF and dtype. Files appear by atomic rename only, so a reader never
sees a half-written one. EngineConfig.weight_cache (`--no-weight-cache`,
`PAGEDOCK_WEIGHT_CACHE=false`) turns the cache off; the loader then never asks for a path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pagedock.models.gguf_reader import GGUFFile
from pagedock.models.registry import cache_dir

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

# Bump when what is stored changes (names, layouts, the rope un-permute): old files are then
# never read again.
CACHE_FORMAT_VERSION = 1
# Smaller files dequantize faster than a cache pays for itself (and tests' tiny files stay out
# of the user cache).
MIN_CACHED_GGUF_BYTES = 16 << 20
_FORMAT_NAME = "pagedock-gguf-weights"
_SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
# Plain float types convert at memory speed; only block-quantized files are worth a cache.
_PLAIN_FLOAT_TYPES = {"F32", "F16", "BF16"}

# (HF name, HF shape) of each weight, in the order the loader yields them.
WeightLayout = list[tuple[str, tuple[int, ...]]]


def weight_cache_path(gguf: GGUFFile, dtype: torch.dtype) -> Path | None:
    """Where the cache of `gguf` in `dtype` lives; None when it should not be cached at all."""
    dtype_name = _dtype_name(dtype)
    if dtype_name not in _SAFETENSORS_DTYPES:
        return None
    total_bytes = sum(t.num_bytes for t in gguf.tensors)
    quantized = any(t.tensor_type.name not in _PLAIN_FLOAT_TYPES for t in gguf.tensors)
    if not quantized or total_bytes < MIN_CACHED_GGUF_BYTES:
        return None
    stat = gguf.path.stat()
    state = f"{CACHE_FORMAT_VERSION}:{stat.st_size}:{stat.st_mtime_ns}"
    name = f"{_cache_prefix(gguf, dtype_name)}{_digest(state)}.safetensors"
    return cache_dir() / "weights" / name


def open_cached_weights(
    path: Path, layout: WeightLayout, dtype: torch.dtype
) -> Iterator[tuple[str, torch.Tensor]] | None:
    """The cached weights, if `path` holds a complete, matching cache; else None.

    A file that exists but does not match (corrupt header, missing or misshapen tensors, another
    format version) is removed, so that this load writes a good one in its place.
    NOTE: checks are structural (header, names, shapes, dtype, file length); tensor bytes are
    not checksummed, since that would cost about what the cache saves.
    """
    from safetensors import safe_open

    if not path.is_file():
        return None
    try:
        handle = safe_open(str(path), framework="pt")
        problem = _layout_problem(handle, layout, _dtype_name(dtype))
    except Exception as e:  # safetensors raises its own SafetensorError, or OSError
        problem = f"{type(e).__name__}: {e}"
    if problem is None:
        return ((name, handle.get_tensor(name)) for name, _ in layout)
    logger.warning("%s: ignoring the weight cache and rebuilding it (%s)", path, problem)
    with contextlib.suppress(OSError):  # a read-only cache: the writer will warn about it
        path.unlink(missing_ok=True)
    return None


def _layout_problem(handle: Any, layout: WeightLayout, dtype_name: str) -> str | None:
    meta = handle.metadata() or {}
    if meta.get("format") != _FORMAT_NAME or meta.get("version") != str(CACHE_FORMAT_VERSION):
        return f"format {meta.get('format')!r} version {meta.get('version')!r}"
    names = set(handle.keys())
    if names != {name for name, _ in layout}:
        return f"holds {len(names)} tensors, expected {len(layout)}"
    expected_dtype = _SAFETENSORS_DTYPES[dtype_name]
    for name, shape in layout:
        found = handle.get_slice(name)
        if tuple(found.get_shape()) != shape or found.get_dtype() != expected_dtype:
            return f"{name} is {found.get_dtype()} {found.get_shape()}, expected {shape}"
    return None


class WeightCacheWriter:
    """Streams weights into a new cache file; `commit` renames it into place.

    Any OSError (full disk, read-only or missing folder) or layout mismatch logs one warning and
    turns the writer into a no-op: the model still loads, just without a cache next time.
    """

    def __init__(self, path: Path, layout: WeightLayout, dtype: torch.dtype) -> None:
        self.path = path
        self._layout = layout
        self._dtype_name = _dtype_name(dtype)
        self._next_index = 0
        self._tmp_path: Path | None = None
        self._file: IO[bytes] | None = None
        self._guard(self._open)

    def add(self, name: str, weight: torch.Tensor) -> None:
        """Append the next weight; names must come in layout order."""
        if self._file is not None:
            self._guard(lambda: self._write(name, weight))

    def commit(self) -> None:
        if self._file is not None:
            self._guard(self._finish)

    def abort(self) -> None:
        """Drop the partial file (the load stopped early or failed)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tmp_path is not None:
            self._tmp_path.unlink(missing_ok=True)
            self._tmp_path = None

    def _guard(self, step: Callable[[], None]) -> None:
        try:
            step()
        except (OSError, ValueError) as e:
            logger.warning(
                "%s: cannot write the weight cache, loading without it (%s)", self.path, e
            )
            self.abort()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        self._tmp_path = Path(tmp)
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the cache from other users of the dir
        self._file = os.fdopen(fd, "wb")
        self._file.write(_safetensors_header(self._layout, self._dtype_name))

    def _write(self, name: str, weight: torch.Tensor) -> None:
        import torch

        expected_name, expected_shape = self._layout[self._next_index]
        if name != expected_name or tuple(weight.shape) != expected_shape:
            raise ValueError(f"weight {name} out of layout order (expected {expected_name})")
        flat_bytes = weight.detach().contiguous().reshape(-1).view(torch.uint8)
        assert self._file is not None
        self._file.write(flat_bytes.numpy().data)
        self._next_index += 1

    def _finish(self) -> None:
        assert self._file is not None and self._tmp_path is not None
        if self._next_index != len(self._layout):
            raise ValueError(f"only {self._next_index} of {len(self._layout)} weights written")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self._tmp_path, self.path)
        self._tmp_path = None
        _remove_older_caches(self.path)


def _safetensors_header(layout: WeightLayout, dtype_name: str) -> bytes:
    """safetensors' framing: u64 header length, JSON header, then the tensors' bytes in order."""
    item_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype_name]
    header: dict[str, object] = {
        "__metadata__": {"format": _FORMAT_NAME, "version": str(CACHE_FORMAT_VERSION)}
    }
    start = 0
    for name, shape in layout:
        end = start + item_bytes * _num_elements(shape)
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[dtype_name],
            "shape": list(shape),
            "data_offsets": [start, end],
        }
        start = end
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # tensor data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text


def _remove_older_caches(path: Path) -> None:
    """Delete caches of the same GGUF and dtype with another state digest (stale ones)."""
    prefix = path.name.rsplit(".", 2)[0] + "."  # <stem>.<path digest>.<dtype>.
    for old in path.parent.glob(f"{prefix}*.safetensors"):
        if old != path:
            with contextlib.suppress(OSError):  # another process may be removing it too
                old.unlink(missing_ok=True)


def _cache_prefix(gguf: GGUFFile, dtype_name: str) -> str:
    return f"{gguf.path.stem}.{_digest(str(gguf.path))}.{dtype_name}."


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _num_elements(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
