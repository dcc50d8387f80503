"""GGUFFile: the header, metadata and tensor table of a GGUF file, parsed in one pass over an mmap.

gguf's own GGUFReader builds a numpy view per metadata element, which costs seconds on a
50k-token vocabulary; this reader decodes with `struct` straight from the mapped bytes and
leaves tensor data in the map until asked for.

    offset 0   "GGUF" | version u32 | tensor_count u64 | kv_count u64
               kv_count x  (key: string, type: u32, value)
               tensor_count x  (name: string, n_dims: u32, dims: u64[n_dims], type: u32,
                                offset: u64)
               padding to `general.alignment` (default 32)
    data_offset  tensor data; each tensor at data_offset + its offset

A string is (length u64, UTF-8 bytes); an array is (item type u32, count u64, items). Only
little-endian GGUF v2/v3 files are read. Torch-free.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from pagedock.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
SUPPORTED_GGUF_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

_UINT32 = struct.Struct("<I")
_UINT64 = struct.Struct("<Q")
_STRING_TYPE = 8
_ARRAY_TYPE = 9
# Scalar GGUF value types by id: the struct that reads one, and numpy's dtype for an array of them.
_SCALARS: dict[int, tuple[struct.Struct, str]] = {
    0: (struct.Struct("<B"), "<u1"),
    1: (struct.Struct("<b"), "<i1"),
    2: (struct.Struct("<H"), "<u2"),
    3: (struct.Struct("<h"), "<i2"),
    4: (_UINT32, "<u4"),
    5: (struct.Struct("<i"), "<i4"),
    6: (struct.Struct("<f"), "<f4"),
    7: (struct.Struct("<?"), "?"),
    10: (_UINT64, "<u8"),
    11: (struct.Struct("<q"), "<i8"),
    12: (struct.Struct("<d"), "<f8"),
}
# Tensor types that numpy holds as themselves; every other type is handed out as raw bytes.
_NUMPY_TENSOR_TYPES = {
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


class _CorruptError(ValueError):
    """Raised inside the parser; `read_gguf_file` turns it into a ModelLoadError naming the file."""


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of a GGUF's tensor table."""

    name: str
    shape: tuple[int, ...]
    """GGUF's order, innermost dimension first ([in, out] for a linear layer)."""
    tensor_type: GGMLQuantizationType
    data_offset: int
    """Absolute offset of the tensor's bytes in the file."""
    num_bytes: int

    @property
    def num_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def hf_shape(self) -> tuple[int, ...]:
        """numpy's / torch's order, outermost first ([out, in] for a linear layer)."""
        return tuple(reversed(self.shape))


@dataclass(frozen=True)
class GGUFFile:
    """A parsed GGUF file: decoded metadata, the tensor table, and the mapped bytes."""

    path: Path
    version: int
    alignment: int
    metadata: dict[str, Any]
    """Decoded values: str, int, float, bool, or a list of them for arrays."""
    tensors: list[GGUFTensorInfo]
    data_offset: int
    buffer: mmap.mmap

    def tensor_data(self, tensor: GGUFTensorInfo) -> np.ndarray:
        """A read-only view of the tensor's bytes, shaped as gguf's reader shapes it: numpy types
        as themselves in `hf_shape`, block-quantized ones as uint8 rows of blocks."""
        data = np.frombuffer(self.buffer, np.uint8, tensor.num_bytes, tensor.data_offset)
        item_type = _NUMPY_TENSOR_TYPES.get(tensor.tensor_type)
        if item_type is not None:
            return data.view(item_type).reshape(tensor.hf_shape)
        block_size, type_size = GGML_QUANT_SIZES[tensor.tensor_type]
        *outer, row = tensor.hf_shape or (1,)
        return data.reshape(*outer, row // block_size * type_size)


def read_gguf_file(file: Path) -> GGUFFile:
    """Parse `file` (absolute); ModelLoadError naming it if it is not a readable GGUF v2/v3."""
    with file.open("rb") as f:
        magic = f.read(len(GGUF_MAGIC))
        if magic != GGUF_MAGIC:
            raise ModelLoadError(
                f"{file}: not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})"
            )
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _parse(file, buffer)
    except (_CorruptError, struct.error, UnicodeDecodeError) as e:
        raise ModelLoadError(
            f"{file}: truncated or corrupt GGUF file ({len(buffer)} bytes): {e}"
        ) from e


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """A parsed, memory-mapped GGUF file; ModelLoadError if it is missing, truncated or corrupt.

    Parsed files are cached per (path, size, mtime): config, tokenizer and weights all read the
    same file.
    """
    file = Path(path).expanduser().resolve()
    try:
        stat = file.stat()
    except FileNotFoundError as e:
        raise ModelLoadError(f"{file}: no such GGUF file") from e
    if not file.is_file():
        raise ModelLoadError(f"{file}: not a file")
    return _open_cached(file, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _open_cached(file: Path, size_bytes: int, mtime_ns: int) -> GGUFFile:
    return read_gguf_file(file)


def _parse(file: Path, buffer: mmap.mmap) -> GGUFFile:
    version = _check_version(file, _UINT32.unpack_from(buffer, 4)[0])
    tensor_count, kv_count = struct.unpack_from("<QQ", buffer, 8)
    cursor = _Cursor(buffer, 24)
    metadata: dict[str, Any] = {}
    for _ in range(cursor.checked_count(kv_count, "metadata keys")):
        key = cursor.string()
        if key in metadata:
            raise _CorruptError(f"metadata key {key!r} appears twice")
        metadata[key] = cursor.value(cursor.u32(), key)
    alignment = _alignment(metadata)
    infos = [_tensor_info(cursor) for _ in range(cursor.checked_count(tensor_count, "tensors"))]
    data_offset = -(-cursor.offset // alignment) * alignment  # round up to the alignment
    tensors = [_place(info, data_offset, len(buffer)) for info in infos]
    if len({t.name for t in tensors}) != len(tensors):
        raise _CorruptError("a tensor name appears twice in the tensor table")
    return GGUFFile(file, version, alignment, metadata, tensors, data_offset, buffer)


def _check_version(file: Path, version: int) -> int:
    if version & 0xFFFF == 0 and version != 0:
        # The version reads byte-swapped: the file was written on a big-endian machine.
        raise ModelLoadError(f"{file}: big-endian GGUF files are not supported")
    if version not in SUPPORTED_GGUF_VERSIONS:
        raise ModelLoadError(
            f"{file}: unsupported GGUF version {version}; pagedock reads versions "
            f"{', '.join(map(str, SUPPORTED_GGUF_VERSIONS))}"
        )
    return int(version)


def _alignment(metadata: dict[str, Any]) -> int:
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _CorruptError(f"general.alignment is {alignment!r}, not a power of two")
    return alignment


def _tensor_info(cursor: _Cursor) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
    name = cursor.string()
    num_dims = cursor.checked_count(cursor.u32(), f"dimensions of tensor {name!r}", item_bytes=8)
    shape = tuple(cursor.u64() for _ in range(num_dims))
    raw_type = cursor.u32()
    try:
        tensor_type = GGMLQuantizationType(raw_type)
    except ValueError:
        raise _CorruptError(f"tensor {name!r} has unknown type id {raw_type}") from None
    return name, shape, tensor_type, cursor.u64()


def _place(
    info: tuple[str, tuple[int, ...], GGMLQuantizationType, int], data_offset: int, file_bytes: int
) -> GGUFTensorInfo:
    """The tensor's absolute position and size, checked against the file's length."""
    name, shape, tensor_type, relative_offset = info
    block_size, type_size = GGML_QUANT_SIZES[tensor_type]
    row = shape[0] if shape else 1
    if row % block_size:
        raise _CorruptError(
            f"tensor {name!r}: row of {row} values is not a multiple of the "
            f"{tensor_type.name} block size {block_size}"
        )
    num_elements = int(np.prod(shape, dtype=np.int64))
    tensor = GGUFTensorInfo(
        name=name,
        shape=shape,
        tensor_type=tensor_type,
        data_offset=data_offset + relative_offset,
        num_bytes=num_elements // block_size * type_size,
    )
    end = tensor.data_offset + tensor.num_bytes
    if end > file_bytes:
        raise _CorruptError(f"tensor {name!r} ends at byte {end}, past the end of the file")
    return tensor


class _Cursor:
    """Reads GGUF values one after another from a buffer."""

    def __init__(self, buffer: mmap.mmap, offset: int) -> None:
        self.buffer = buffer
        self.offset = offset

    def u32(self) -> int:
        (value,) = _UINT32.unpack_from(self.buffer, self.offset)
        self.offset += 4
        return int(value)

    def u64(self) -> int:
        (value,) = _UINT64.unpack_from(self.buffer, self.offset)
        self.offset += 8
        return int(value)

    def checked_count(self, count: int, what: str, item_bytes: int = 1) -> int:
        # NOTE: garbage read as a count is usually huge; reject it before looping over it.
        if count * item_bytes > len(self.buffer) - self.offset:
            raise _CorruptError(f"{count} {what} cannot fit in the rest of the file")
        return count

    def string(self) -> str:
        length = self.u64()
        end = self.offset + length
        if end > len(self.buffer):
            raise _CorruptError(f"a {length}-byte string at byte {self.offset} runs past the end")
        text = str(self.buffer[self.offset : end], "utf-8")
        self.offset = end
        return text

    def value(self, value_type: int, key: str) -> Any:
        if value_type == _STRING_TYPE:
            return self.string()
        if value_type == _ARRAY_TYPE:
            return self.array(key)
        scalar = _SCALARS.get(value_type)
        if scalar is None:
            raise _CorruptError(f"metadata key {key!r} has unknown value type {value_type}")
        (value,) = scalar[0].unpack_from(self.buffer, self.offset)
        self.offset += scalar[0].size
        return value

    def array(self, key: str) -> list[Any]:
        item_type, count = self.u32(), self.u64()
        scalar = _SCALARS.get(item_type)
        if scalar is not None:
            # One numpy read for the whole array: token types are ~50k int32s.
            item_bytes = scalar[0].size
            self.checked_count(count, f"items of {key!r}", item_bytes)
            values = np.frombuffer(self.buffer, scalar[1], count, self.offset)
            self.offset += count * item_bytes
            return values.tolist()
        self.checked_count(count, f"items of {key!r}", item_bytes=8)
        if item_type == _STRING_TYPE:
            return [self.string() for _ in range(count)]
        return [self.value(item_type, key) for _ in range(count)]
