"""The weights' identity salts the block-hash root: equal for the same weights wherever they were
copied, different for other weights (another revision of the model)."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.runtime.weights_identity import (
    NUM_WINDOWS,
    WINDOW_BYTES,
    weights_fingerprint,
    window_offsets,
)
from tests.tiny_model import make_tiny_llama_dir


def test_a_copy_of_the_same_weights_has_the_same_identity(tmp_path: Path) -> None:
    model = make_tiny_llama_dir(tmp_path / "a")
    copy = shutil.copytree(model, tmp_path / "elsewhere" / "b")
    assert weights_fingerprint(model) == weights_fingerprint(copy)


def test_other_weights_have_another_identity(tmp_path: Path) -> None:
    model = make_tiny_llama_dir(tmp_path / "a")
    retrained = make_tiny_llama_dir(tmp_path / "b", initializer_range=0.21)
    assert weights_fingerprint(model) != weights_fingerprint(retrained)


def test_one_weights_file_is_named_by_its_content_not_its_name(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40_000  # 10 MB: sampled in windows
    (tmp_path / "one.gguf").write_bytes(data)
    (tmp_path / "two.gguf").write_bytes(data)
    changed = bytearray(data)
    changed[-1] ^= 1  # in the last window
    (tmp_path / "three.gguf").write_bytes(bytes(changed))
    one, two, three = (weights_fingerprint(tmp_path / f"{n}.gguf") for n in ("one", "two", "three"))
    assert one == two != three


def test_windows_cover_a_small_file_whole_and_a_large_one_end_to_end() -> None:
    assert window_offsets(3 * WINDOW_BYTES) == [0, WINDOW_BYTES, 2 * WINDOW_BYTES]
    size = 100 * NUM_WINDOWS * WINDOW_BYTES
    offsets = window_offsets(size)
    assert len(offsets) == NUM_WINDOWS and offsets[0] == 0
    assert offsets[-1] + WINDOW_BYTES == size
