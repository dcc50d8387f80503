"""The record of a JIT kernel build: a later start imports the recorded build directly, and only
while everything it was built from still matches."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from engine.kernels import jit_build_record
from engine.kernels.cpu_kernels import load_cpu_kernels
from engine.kernels.jit_build_record import build_key, load_recorded, record_path, write_record


@pytest.fixture()
def kernels() -> ModuleType:
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler, no JIT build to record")
    module = load_cpu_kernels(enabled=True)
    assert module is not None
    return module


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PAGEDOCK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_recorded_build_is_imported_again_for_the_same_key(kernels: ModuleType) -> None:
    key = build_key("pagedock_cpu_test", ["-O3"], ["-fopenmp"], "2.0")
    write_record("pagedock_cpu_test", key, kernels)

    again = load_recorded("pagedock_cpu_test", key)

    assert again is not None
    assert again.__file__ == kernels.__file__
    assert hasattr(again, "paged_decode")


def test_another_flag_or_torch_version_is_another_key() -> None:
    key = build_key("pagedock_cpu_test", ["-O3"], ["-fopenmp"], "2.0")
    assert build_key("pagedock_cpu_test", ["-O2"], ["-fopenmp"], "2.0") != key
    assert build_key("pagedock_cpu_test", ["-O3"], ["-fopenmp"], "2.1") != key
    assert build_key("pagedock_cpu_other", ["-O3"], ["-fopenmp"], "2.0") != key


def test_a_record_for_another_key_is_not_used(kernels: ModuleType) -> None:
    write_record("pagedock_cpu_test", "old-key", kernels)
    assert load_recorded("pagedock_cpu_test", "new-key") is None


def test_a_rebuilt_or_deleted_object_is_not_used(kernels: ModuleType, tmp_path: Path) -> None:
    copy = tmp_path / Path(str(kernels.__file__)).name
    shutil.copy2(str(kernels.__file__), copy)
    fake = ModuleType(kernels.__name__)
    fake.__file__ = str(copy)
    write_record("pagedock_cpu_test", "key", fake)
    later = copy.stat().st_mtime_ns + 1_000_000_000
    os.utime(copy, ns=(later, later))
    assert load_recorded("pagedock_cpu_test", "key") is None  # rebuilt since it was recorded
    copy.unlink()
    assert load_recorded("pagedock_cpu_test", "key") is None


def test_a_garbled_record_is_ignored(own_cache: Path) -> None:
    path = record_path("pagedock_cpu_test")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert load_recorded("pagedock_cpu_test", "key") is None
    path.write_text('{"path": 3}')
    assert load_recorded("pagedock_cpu_test", "key") is None


def test_a_cache_that_cannot_be_written_only_costs_the_record(
    kernels: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(jit_build_record, "cache_dir", lambda: blocker / "below-a-file")
    write_record("pagedock_cpu_test", "key", kernels)  # no exception
    assert load_recorded("pagedock_cpu_test", "key") is None
