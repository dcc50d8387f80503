"""The C++ kernels build wherever a compiler is: the torch fallback is for machines without one,
never a silent way for the suite to pass without testing the benchmarked path."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from engine.kernels.cpu_kernels import load_cpu_kernels


def test_the_kernels_build_wherever_a_compiler_is() -> None:
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler: the torch path is the engine's path here")
    assert load_cpu_kernels(enabled=True) is not None, (
        "the C++ CPU kernels failed to build (see the warning logged above)"
    )


def test_the_lock_of_a_dead_build_is_removed_and_a_live_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's build waits for ever on a killed build's lock; an old lock is a dead build's."""
    from engine.kernels import cpu_kernels

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build_dir = tmp_path / "pagedock_cpu_test"
    build_dir.mkdir()
    lock = build_dir / "lock"
    lock.touch()
    cpu_kernels._remove_stale_build_lock("pagedock_cpu_test")
    assert lock.exists()  # a build under way
    old = time.time() - cpu_kernels._STALE_BUILD_LOCK_S - 60
    os.utime(lock, (old, old))
    cpu_kernels._remove_stale_build_lock("pagedock_cpu_test")
    assert not lock.exists()
