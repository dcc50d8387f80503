"""Choosing the prebuilt C++ kernel build a CPU can run, and reporting which kernels run.

The builds themselves are made and loaded in the image check (images/check.sh); these tests need
no compiler and no image.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from engine.kernels import cpu_kernels
from engine.kernels.prebuilt import VARIANTS, choose_variant, cpu_flags, load_prebuilt

BASELINE_FLAGS = {"fpu", "sse", "sse2", "cx8"}
V2_FLAGS = BASELINE_FLAGS | {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}
# A Haswell-class CPU: AVX2 and FMA, no AVX-512.
V3_FLAGS = V2_FLAGS | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4_FLAGS = V3_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


def march_for(flags: set[str]) -> str:
    return choose_variant(frozenset(flags)).march


def test_an_avx512_cpu_runs_the_v4_build() -> None:
    assert march_for(V4_FLAGS) == "x86-64-v4"


def test_an_avx2_fma_cpu_runs_the_v3_build() -> None:
    assert march_for(V3_FLAGS) == "x86-64-v3"


def test_avx512_foundation_alone_is_not_enough_for_v4() -> None:
    # Xeon Phi (Knights Landing) has AVX-512F and CD but not BW, DQ or VL.
    assert march_for(V3_FLAGS | {"avx512f", "avx512cd"}) == "x86-64-v3"


def test_avx2_without_fma_falls_to_the_baseline() -> None:
    assert march_for(V3_FLAGS - {"fma"}) == "x86-64"


def test_unknown_flags_fall_to_the_baseline() -> None:
    assert march_for(set()) == "x86-64"


def test_variants_are_ordered_best_first_and_end_with_one_every_cpu_runs() -> None:
    needs = [v.required_flags for v in VARIANTS]
    assert all(later < earlier for earlier, later in itertools.pairwise(needs))
    assert needs[-1] == frozenset()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 fma\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "fma"}


def test_unreadable_cpuinfo_means_no_flags(tmp_path: Path) -> None:
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_a_folder_without_the_chosen_build_is_an_import_error(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match="pagedock_cpu_x86_64_v3"):
        load_prebuilt(tmp_path, frozenset(V3_FLAGS))


@pytest.fixture
def fresh_kernel_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Kernel loading forgotten before and after: the choice is cached per process."""
    monkeypatch.setattr(cpu_kernels, "_loaded_path", None)
    monkeypatch.setattr(cpu_kernels, "_enabled", True)
    cpu_kernels._build_cpu_kernels.cache_clear()
    yield
    cpu_kernels._build_cpu_kernels.cache_clear()


@pytest.mark.usefixtures("fresh_kernel_state")
def test_the_prebuilt_folder_is_used_when_set_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = ModuleType("fake_kernels")
    monkeypatch.setenv(cpu_kernels.PREBUILT_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpu_kernels, "load_prebuilt", lambda d, f: (module, VARIANTS[1]))
    monkeypatch.setattr(cpu_kernels, "_jit_build", lambda: pytest.fail("JIT-built anyway"))
    assert cpu_kernels.load_cpu_kernels() is module
    assert cpu_kernels.cpu_kernel_path() == "prebuilt x86-64-v3"


@pytest.mark.usefixtures("fresh_kernel_state")
def test_an_unusable_prebuilt_folder_falls_back_to_the_jit_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module = ModuleType("jit_kernels")
    monkeypatch.setenv(cpu_kernels.PREBUILT_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpu_kernels, "_jit_build", lambda: (module, "jit -march=native"))
    assert cpu_kernels.load_cpu_kernels() is module
    assert cpu_kernels.cpu_kernel_path() == "jit -march=native"
    assert "prebuilt C++ CPU kernels unusable" in caplog.text


@pytest.mark.usefixtures("fresh_kernel_state")
def test_without_a_prebuilt_folder_the_kernels_are_jit_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(cpu_kernels.PREBUILT_DIR_ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "load_prebuilt", lambda d, f: pytest.fail("used prebuilt"))
    monkeypatch.setattr(cpu_kernels, "_jit_build", lambda: (None, "torch"))
    assert cpu_kernels.load_cpu_kernels() is None
    assert cpu_kernels.cpu_kernel_path() == "torch"


@pytest.mark.usefixtures("fresh_kernel_state")
def test_nothing_is_reported_loaded_before_something_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpu_kernels.cpu_kernel_path() == "not loaded"
    cpu_kernels.set_cpu_kernels_enabled(False)
    assert cpu_kernels.cpu_kernel_path() == "torch"
