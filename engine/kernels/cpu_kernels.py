"""The engine's C++ CPU kernels: prebuilt ones when an image ships them, else compiled on first
use with the machine's compiler and cached.

With PAGEDOCK_CPU_KERNELS_DIR set (the engine-cpu image), the build for this CPU's x86-64 level
is loaded from there (prebuilt.py). Otherwise torch's JIT extension builder compiles `csrc/*.cpp`
once per source version and CPU (the build uses -march=native, so the cache key includes the
CPU's model name), then later starts load the shared object in well under a second. No compiler,
or a failed build, falls back to the torch path with one warning: correctness never depends on
it. EngineConfig.cpu_kernels (`--no-cpu-kernels`, `PAGEDOCK_CPU_KERNELS=false`) turns them off.
`cpu_kernel_path()` says which of these the process runs (logged, and in the server's /version).
A JIT build this machine made before is imported directly on later starts, without torch's
up-to-date check (jit_build_record.py; `set_cpu_kernels_cache(False)` always asks torch).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import time
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from engine.kernels.jit_build_record import build_key, load_recorded, write_record
from engine.kernels.prebuilt import (
    CSRC,
    KERNEL_LDFLAGS,
    cpu_flags,
    kernel_cflags,
    kernel_sources,
    load_prebuilt,
)
from engine.startup_stages import mark_stage

logger = logging.getLogger("pagedock.cpu_kernels")

PREBUILT_DIR_ENV = "PAGEDOCK_CPU_KERNELS_DIR"
_SOURCES = kernel_sources()
_HEADERS = sorted(CSRC.glob("*.h"))
# A kernel build takes about a minute (several on a loaded machine): a build lock this old is a
# dead build's.
_STALE_BUILD_LOCK_S = 15 * 60
# NOTE: process-wide, since the layers (norm, rotary, SiLU) look the kernels up on every call
# through kernels_for(); LLMEngine sets it from EngineConfig.cpu_kernels before building a model.
_enabled = True
# What _build_cpu_kernels() settled on; None until something asked for the kernels.
_loaded_path: str | None = None
# Import a JIT build recorded on this machine without torch's up-to-date check
# (EngineConfig.cpu_kernels_cache; the server sets it before building the engine).
_use_build_record = True
# Whether the "kernels_ready" start-up stage is marked (once: it keeps its first time anyway).
_marked_ready = False


def _cpu_identity() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def set_cpu_kernels_enabled(enabled: bool) -> None:
    """Turn the kernels on or off for this process (what `load_cpu_kernels()` then returns)."""
    global _enabled
    _enabled = enabled


def set_cpu_kernels_cache(enabled: bool) -> None:
    """Whether a JIT build recorded on this machine is imported directly (jit_build_record.py)."""
    global _use_build_record
    _use_build_record = enabled


def load_cpu_kernels(enabled: bool | None = None) -> ModuleType | None:
    """The compiled module; None when disabled (by `enabled`, else by the process switch) or
    when it can't be built here."""
    if not (_enabled if enabled is None else enabled):
        _mark_ready()  # none to load
        return None
    module = _build_cpu_kernels()
    _mark_ready()
    return module


def _mark_ready() -> None:
    """The start-up stage, marked once: every layer's kernels ask for the module every step."""
    global _marked_ready
    if not _marked_ready:
        mark_stage("kernels_ready")
        _marked_ready = True


def cpu_kernel_path() -> str:
    """Which CPU kernels this process runs: `prebuilt x86-64-v3`, `jit -march=native`, `torch`
    (none: disabled or unavailable) or `not loaded` (nothing has asked for them yet, as on GPUs)."""
    if not _enabled:
        return "torch"
    return _loaded_path or "not loaded"


@cache
def _build_cpu_kernels() -> ModuleType | None:
    global _loaded_path
    module, path = None, "torch"
    if prebuilt_dir := os.environ.get(PREBUILT_DIR_ENV):
        module, path = _load_prebuilt(Path(prebuilt_dir))
    if module is None:
        module, path = _jit_build()
    _loaded_path = path
    logger.info("C++ CPU kernels: %s", path)
    return module


def _load_prebuilt(directory: Path) -> tuple[ModuleType | None, str]:
    try:
        module, variant = load_prebuilt(directory, cpu_flags())
    except (ImportError, OSError) as e:
        logger.warning("prebuilt C++ CPU kernels unusable (%s); trying a JIT build", e)
        return None, "torch"
    return module, f"prebuilt {variant.march}"


def _jit_build() -> tuple[ModuleType | None, str]:
    digest = hashlib.sha256(_cpu_identity().encode())
    for source in [*_SOURCES, *_HEADERS]:
        digest.update(source.read_bytes())
    name = f"pagedock_cpu_{digest.hexdigest()[:12]}"
    cflags = kernel_cflags("native")
    key = build_key(name, cflags, KERNEL_LDFLAGS, torch.__version__)
    if _use_build_record and (module := load_recorded(name, key)) is not None:
        return module, "jit -march=native"
    try:
        from torch.utils.cpp_extension import load

        _remove_stale_build_lock(name)
        module = load(
            name=name,
            sources=[str(s) for s in _SOURCES],
            extra_cflags=cflags,
            extra_ldflags=KERNEL_LDFLAGS,
            verbose=False,
        )
    except Exception as e:  # any build failure means: use the torch path
        logger.warning("C++ CPU kernels unavailable (%s); using the torch attention path", e)
        return None, "torch"
    write_record(name, key, module)
    return module, "jit -march=native"


def _remove_stale_build_lock(name: str) -> None:
    """torch's build waits for ever on the lock file of a build that was killed (a test run cut
    short, a pod evicted mid-build); a build takes about a minute, so a lock much older than that
    is a dead build's and is removed."""
    from torch.utils.cpp_extension import _get_build_directory

    lock = Path(_get_build_directory(name, verbose=False)) / "lock"
    try:
        age_s = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age_s > _STALE_BUILD_LOCK_S:
        logger.warning(
            "removing the lock of a C++ kernel build that died %.0f s ago: %s", age_s, lock
        )
        lock.unlink(missing_ok=True)


def kernels_for(x: torch.Tensor, bf16_ok: bool = False) -> ModuleType | None:
    """The compiled kernels when they apply to `x` (float32 on the CPU, or bfloat16 for the
    kernels that take `bf16_ok` inputs), else None."""
    dtypes = (torch.float32, torch.bfloat16) if bf16_ok else (torch.float32,)
    if x.device.type != "cpu" or x.dtype not in dtypes:
        return None
    return load_cpu_kernels()
