"""The dequantized-weight cache: written once, reused exactly, rebuilt when bad, skippable."""

from __future__ import annotations

import errno
import itertools
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.loader import gguf_weight_cache
from engine.loader.gguf_loader import iter_gguf_weights
from tests.text.factories import TINY_TOKENS, tiny_llama_weights, write_tiny_gguf


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache dir, the cache switched on, and tiny files big enough to cache."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("PAGEDOCK_CACHE_DIR", str(directory))
    monkeypatch.setattr(gguf_weight_cache, "MIN_CACHED_GGUF_BYTES", 0)
    return directory


def make_quantized_gguf(path: Path) -> Path:
    """A tiny llama GGUF whose embedding is Q8_0, so loading it dequantizes."""
    from gguf import GGMLQuantizationType, quants

    weights = tiny_llama_weights()
    del weights["model.embed_tokens.weight"]
    embed = np.random.default_rng(1).standard_normal((len(TINY_TOKENS), 64)).astype(np.float32)
    packed = quants.quantize(embed, GGMLQuantizationType.Q8_0)
    raw = {"token_embd.weight": (packed, GGMLQuantizationType.Q8_0)}
    return write_tiny_gguf(path, weights, raw_tensors=raw)


def load(
    path: Path, dtype: torch.dtype = torch.float32, weight_cache: bool = True
) -> list[tuple[str, torch.Tensor]]:
    return list(iter_gguf_weights(path, dtype, progress=False, weight_cache=weight_cache))


def cache_files(cache_dir: Path) -> list[Path]:
    """Every file in the weights folder, temporary ones included."""
    weights_dir = cache_dir / "weights"
    return sorted(weights_dir.iterdir()) if weights_dir.is_dir() else []


def forbid_dequantize(monkeypatch: pytest.MonkeyPatch) -> None:
    from gguf import quants

    def fail(*args: Any) -> Any:
        raise AssertionError("dequantize called although the weight cache holds the weights")

    monkeypatch.setattr(quants, "dequantize", fail)


def assert_identical(
    ours: list[tuple[str, torch.Tensor]], expected: list[tuple[str, torch.Tensor]]
) -> None:
    assert [name for name, _ in ours] == [name for name, _ in expected]
    for (name, weight), (_, reference) in zip(ours, expected, strict=True):
        assert weight.dtype == reference.dtype, name
        assert torch.equal(weight, reference), name


def test_first_load_writes_one_cache_file(cache_dir: Path, tmp_path: Path) -> None:
    load(make_quantized_gguf(tmp_path / "q8.gguf"))
    (cached,) = cache_files(cache_dir)
    assert cached.name.startswith("q8.") and ".float32." in cached.name
    assert cached.suffix == ".safetensors"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_second_load_reads_the_cache_not_the_quantized_data(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype
) -> None:
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    fresh = load(path, dtype)
    forbid_dequantize(monkeypatch)
    assert_identical(load(path, dtype), fresh)
    assert len(cache_files(cache_dir)) == 1


def test_cached_weights_equal_dequantized_ones_exactly(cache_dir: Path, tmp_path: Path) -> None:
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    uncached = load(path, weight_cache=False)
    load(path)  # writes the cache
    assert_identical(load(path), uncached)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: b"\xff" * 16 + data[16:],
        lambda data: data.replace(b"pagedock-gguf-weights", b"pagedock-gguf-weightz"),
        lambda data: data.replace(b'"shape":[4,64]', b'"shape":[64,4]'),
    ],
    ids=["truncated", "garbage-header", "foreign-format", "wrong-shape"],
)
def test_corrupt_cache_is_detected_and_rebuilt(
    cache_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any
) -> None:
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    fresh = load(path)
    (cached,) = cache_files(cache_dir)
    good_bytes = cached.read_bytes()
    damaged = damage(good_bytes)
    assert damaged != good_bytes
    cached.write_bytes(damaged)
    with caplog.at_level(logging.WARNING, logger=gguf_weight_cache.__name__):
        assert_identical(load(path), fresh)
    assert "ignoring the weight cache and rebuilding it" in caplog.text
    assert cache_files(cache_dir) == [cached] and cached.read_bytes() == good_bytes


def test_a_changed_gguf_gets_a_new_cache_and_the_old_one_goes(
    cache_dir: Path, tmp_path: Path
) -> None:
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    load(path)
    (old,) = cache_files(cache_dir)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    load(path)
    (new,) = cache_files(cache_dir)
    assert new != old


def test_disable_switch_skips_the_cache(cache_dir: Path, tmp_path: Path) -> None:
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    load(path, weight_cache=False)
    load(path, weight_cache=False)
    assert cache_files(cache_dir) == []


def test_unwritable_cache_dir_loads_without_the_cache(
    cache_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache_dir.mkdir()
    (cache_dir / "weights").write_text("a file where the weights folder belongs")
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    with caplog.at_level(logging.WARNING, logger=gguf_weight_cache.__name__):
        weights = load(path)
    assert len(weights) == 12
    assert "cannot write the weight cache, loading without it" in caplog.text


def test_full_disk_loads_without_the_cache_and_leaves_no_partial_file(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(gguf_weight_cache.os, "fsync", disk_full)
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    assert len(load(path)) == 12
    assert cache_files(cache_dir) == []


def test_a_load_stopped_early_leaves_no_partial_file(cache_dir: Path, tmp_path: Path) -> None:
    path = make_quantized_gguf(tmp_path / "q8.gguf")
    weights = iter_gguf_weights(path, torch.float32, progress=False)
    list(itertools.islice(weights, 3))
    weights.close()  # what the caller's generator cleanup does
    assert cache_files(cache_dir) == []


def test_small_and_unquantized_files_are_not_cached(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(write_tiny_gguf(tmp_path / "f32.gguf", tiny_llama_weights()))  # plain float32
    monkeypatch.setattr(gguf_weight_cache, "MIN_CACHED_GGUF_BYTES", 1 << 20)
    load(make_quantized_gguf(tmp_path / "q8.gguf"))  # quantized but tiny
    assert cache_files(cache_dir) == []
