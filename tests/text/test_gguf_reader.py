"""GGUFFile: the same metadata and tensors as gguf's own reader, and clear errors on bad files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pagedock.errors import ModelLoadError
from pagedock.models.gguf_reader import GGUFFile, read_gguf_file
from tests.text.factories import tiny_llama_weights, write_tiny_gguf

# Every scalar GGUF value type, written through gguf's writer under a key named for it.
SCALARS: dict[str, tuple[str, Any]] = {
    "test.u8": ("add_uint8", 200),
    "test.i8": ("add_int8", -100),
    "test.u16": ("add_uint16", 60000),
    "test.i16": ("add_int16", -30000),
    "test.u32": ("add_uint32", 4_000_000_000),
    "test.i32": ("add_int32", -2_000_000_000),
    "test.u64": ("add_uint64", 2**63 + 5),
    "test.i64": ("add_int64", -(2**62)),
    "test.f32": ("add_float32", 1e-5),
    "test.f64": ("add_float64", 1e-300),
    "test.bool": ("add_bool", True),
    "test.str": ("add_string", "héllo ✓"),
}
ARRAYS: dict[str, list[Any]] = {
    "test.ints": [3, 1, 4, 1, 5],
    "test.floats": [0.5, -2.25],
    "test.strings": ["a", "", "ü b", "<|im_end|>"],
    "test.bools": [True, False, True],
}


def write_gguf_with_every_value_type(path: Path, alignment: int | None = None) -> Path:
    """A tiny llama GGUF that also holds one metadata key per GGUF value type."""
    from gguf import GGMLQuantizationType, GGUFWriter, quants

    writer = GGUFWriter(path, "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, (method, value) in SCALARS.items():
        getattr(writer, method)(key, value)
    for key, values in ARRAYS.items():
        writer.add_array(key, values)
    rng = np.random.default_rng(0)
    writer.add_tensor("a.weight", rng.standard_normal((3, 5)).astype(np.float32))
    writer.add_tensor("b.weight", rng.standard_normal((2, 4)).astype(np.float16))
    packed = quants.quantize(
        rng.standard_normal((2, 64)).astype(np.float32), GGMLQuantizationType.Q8_0
    )
    writer.add_tensor("c.weight", packed, raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assert_same_as_gguf_reader(ours: GGUFFile) -> None:
    """Field by field and tensor by tensor, what gguf.GGUFReader reads from the same file."""
    from gguf import GGUFReader

    theirs = GGUFReader(ours.path)
    keys = [k for k in theirs.fields if not k.startswith("GGUF.")]  # its pseudo-fields
    assert keys == list(ours.metadata)
    for key in keys:
        expected = theirs.fields[key].contents()
        assert ours.metadata[key] == expected, key
        assert repr(ours.metadata[key]) == repr(expected), key  # same Python types too
    assert (ours.data_offset, ours.alignment) == (theirs.data_offset, theirs.alignment)
    assert len(ours.tensors) == len(theirs.tensors)
    for mine, reference in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.name == reference.name
        assert mine.tensor_type == reference.tensor_type
        assert mine.shape == tuple(reference.shape.tolist())
        assert (mine.data_offset, mine.num_bytes) == (reference.data_offset, reference.n_bytes)
        data = ours.tensor_data(mine)
        assert data.dtype == reference.data.dtype and data.shape == reference.data.shape
        assert np.array_equal(data, reference.data), mine.name


def test_every_value_type_reads_as_gguf_reader_reads_it(tmp_path: Path) -> None:
    gguf = read_gguf_file(write_gguf_with_every_value_type(tmp_path / "types.gguf"))
    assert_same_as_gguf_reader(gguf)
    assert gguf.metadata["test.str"] == "héllo ✓"
    assert gguf.metadata["test.strings"] == ARRAYS["test.strings"]
    assert gguf.metadata["test.u64"] == 2**63 + 5


@pytest.mark.slow
def test_real_model_reads_as_gguf_reader_reads_it(smollm2_gguf_path: Path) -> None:
    gguf = read_gguf_file(smollm2_gguf_path)
    assert_same_as_gguf_reader(gguf)
    assert len(gguf.metadata["tokenizer.ggml.tokens"]) == 49152


def test_custom_alignment_places_tensor_data(tmp_path: Path) -> None:
    gguf = read_gguf_file(write_gguf_with_every_value_type(tmp_path / "a.gguf", alignment=256))
    assert gguf.alignment == 256 and gguf.data_offset % 256 == 0
    assert_same_as_gguf_reader(gguf)


def test_version_2_files_are_read(tmp_path: Path) -> None:
    data = bytearray(write_tiny_gguf(tmp_path / "v3.gguf", tiny_llama_weights()).read_bytes())
    data[4:8] = struct.pack("<I", 2)  # v2 and v3 share one little-endian layout
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(data)
    assert read_gguf_file(v2).version == 2
    assert read_gguf_file(v2).metadata == read_gguf_file(tmp_path / "v3.gguf").metadata


@pytest.mark.parametrize(
    ("version_bytes", "message"),
    [
        (struct.pack("<I", 1), "unsupported GGUF version 1"),
        (struct.pack("<I", 7), "unsupported GGUF version 7"),
        (struct.pack(">I", 3), "big-endian GGUF files are not supported"),
    ],
    ids=["v1", "v7", "big-endian"],
)
def test_unsupported_versions_are_clear_errors(
    tmp_path: Path, version_bytes: bytes, message: str
) -> None:
    data = bytearray(write_tiny_gguf(tmp_path / "ok.gguf", tiny_llama_weights()).read_bytes())
    data[4:8] = version_bytes
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data)
    with pytest.raises(ModelLoadError, match=rf"bad\.gguf: {message}"):
        read_gguf_file(bad)


def test_every_truncation_is_a_clear_error(tmp_path: Path) -> None:
    """Cut anywhere (header, metadata, tensor table, tensor data): a ModelLoadError, nothing
    else."""
    data = write_tiny_gguf(tmp_path / "whole.gguf", tiny_llama_weights()).read_bytes()
    cut = tmp_path / "cut.gguf"
    for keep_bytes in range(len(data)):
        cut.write_bytes(data[:keep_bytes])
        with pytest.raises(ModelLoadError, match=r"cut\.gguf: .*(truncated|not a GGUF)"):
            read_gguf_file(cut)


def _corrupt(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, old
    return data.replace(old, new)


def _tensor_entry(name: bytes, dims: tuple[int, int], type_id: int) -> bytes:
    """A tensor-table entry up to its type id: name, n_dims, dims (innermost first), type."""
    return struct.pack(f"<Q{len(name)}sI2QI", len(name), name, 2, *dims, type_id)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        # The value type that follows key "test.u8": 0 (uint8) -> 77 (no such type).
        (b"test.u8\x00\x00\x00\x00", b"test.u8\x4d\x00\x00\x00", "unknown value type 77"),
        # The item count of test.ints (an array (9) of int32 (5)): 5 -> 2^40, more than fit.
        (
            b"test.ints" + struct.pack("<IIQ", 9, 5, 5),
            b"test.ints" + struct.pack("<IIQ", 9, 5, 2**40),
            "cannot fit",
        ),
        (b"test.i8", b"test.u8", "'test.u8' appears twice"),
        (
            b"general.alignment\x04\x00\x00\x00" + struct.pack("<I", 256),
            b"general.alignment\x04\x00\x00\x00" + struct.pack("<I", 100),
            "not a power of two",
        ),
        (
            _tensor_entry(b"c.weight", (64, 2), 8),
            _tensor_entry(b"c.weight", (64, 2), 99),
            "'c.weight' has unknown type id 99",
        ),
        (
            _tensor_entry(b"c.weight", (64, 2), 8),
            _tensor_entry(b"c.weight", (60, 2), 8),
            "not a multiple of the Q8_0 block size",
        ),
    ],
    ids=["value-type", "array-count", "duplicate-key", "alignment", "tensor-type", "block-size"],
)
def test_corrupt_structure_is_a_clear_error(
    tmp_path: Path, old: bytes, new: bytes, problem: str
) -> None:
    data = write_gguf_with_every_value_type(tmp_path / "ok.gguf", alignment=256).read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(_corrupt(data, old, new))
    with pytest.raises(ModelLoadError, match=rf"bad\.gguf: truncated or corrupt GGUF.*{problem}"):
        read_gguf_file(bad)


def test_tensor_data_past_the_end_is_a_clear_error(tmp_path: Path) -> None:
    data = write_tiny_gguf(tmp_path / "ok.gguf", tiny_llama_weights()).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-1])
    with pytest.raises(ModelLoadError, match=r"cut\.gguf: .*ends at byte \d+, past the end"):
        read_gguf_file(cut)
