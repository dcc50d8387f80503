"""The engine's C++ CPU kernels, compiled on first use with the machine's compiler and cached.

torch's JIT extension builder compiles `csrc/*.cpp` once per source version and CPU (the build
uses -march=native, so the cache key includes the CPU's model name), then later starts load the
shared object in well under a second. No compiler, or a failed build, falls back to the torch path
with one warning: correctness never depends on it. EngineConfig.cpu_kernels (`--no-cpu-kernels`,
`PAGEDOCK_CPU_KERNELS=false`) turns them off.
"""

from __future__ import annotations

import hashlib
import logging
import platform
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

logger = logging.getLogger("pagedock.cpu_kernels")

_CSRC = Path(__file__).parent / "csrc"
_SOURCES = sorted(_CSRC.glob("*.cpp"))
_HEADERS = sorted(_CSRC.glob("*.h"))
# NOTE: process-wide, since the layers (norm, rotary, SiLU) look the kernels up on every call
# through kernels_for(); LLMEngine sets it from EngineConfig.cpu_kernels before building a model.
_enabled = True


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


def load_cpu_kernels(enabled: bool | None = None) -> ModuleType | None:
    """The compiled module; None when disabled (by `enabled`, else by the process switch) or
    when it can't be built here."""
    if not (_enabled if enabled is None else enabled):
        return None
    return _build_cpu_kernels()


@cache
def _build_cpu_kernels() -> ModuleType | None:
    try:
        from torch.utils.cpp_extension import load

        digest = hashlib.sha256(_cpu_identity().encode())
        for source in [*_SOURCES, *_HEADERS]:
            digest.update(source.read_bytes())
        name = f"pagedock_cpu_{digest.hexdigest()[:12]}"
        return load(
            name=name,
            sources=[str(s) for s in _SOURCES],
            # -ffast-math lets GCC vectorise expf through glibc's libmvec; the kernel keeps no
            # infinities or NaNs around (the running max starts at -FLT_MAX), so it is safe.
            extra_cflags=["-O3", "-march=native", "-fopenmp", "-ffast-math"],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as e:  # any build failure means: use the torch path
        logger.warning("C++ CPU kernels unavailable (%s); using the torch attention path", e)
        return None


def kernels_for(x: torch.Tensor) -> ModuleType | None:
    """The compiled kernels when they apply to `x` (float32 on the CPU), else None."""
    if x.device.type != "cpu" or x.dtype != torch.float32:
        return None
    return load_cpu_kernels()
