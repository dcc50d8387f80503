"""Which torch device and dtype an engine runs on, from the config's names."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from pagedock.errors import ConfigError

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for, but no CUDA device is available")
    return torch.device(name)


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        # bf16 is 2-5x slower than fp32 on CPUs without AMX; GPUs want bf16.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


# The instructions that multiply bf16 in hardware; without them oneDNN emulates bf16 and a bf16
# GEMM runs slower than a float32 one.
_NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (Linux: /proc/cpuinfo's flags)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return bool(_NATIVE_BF16_FLAGS & set(flags.partition(":")[2].split()))


def pick_cpu_gemm_dtype(
    name: str, dtype_name: str, dtype: torch.dtype, device: torch.device
) -> torch.dtype:
    """The dtype a CPU engine's linear layers multiply in. bf16 weights with float32 activations
    halve the bytes each GEMM reads and run the multiply on the bf16 units (~1.8x a float32 GEMM
    on an AVX512-BF16 EPYC); everything numerically delicate (norms, softmax, the KV cache, the
    logits' sampling) stays float32. Only `auto` dtype opts in on its own: an explicit float32
    means float32 throughout (the parity tests' setting)."""
    if device.type != "cpu" or dtype != torch.float32:
        return dtype
    if name == "auto":
        native = dtype_name == "auto" and cpu_has_native_bf16()
        return torch.bfloat16 if native else torch.float32
    if name == "bfloat16" and not cpu_has_native_bf16():
        raise ConfigError(
            "cpu_gemm_dtype bfloat16 needs a CPU with native bf16 (avx512_bf16 or amx_bf16 in "
            "/proc/cpuinfo); this one would emulate it, slower than float32"
        )
    return _DTYPES[name]


def pick_kv_cache_dtype(
    name: str, dtype: torch.dtype, device: torch.device, gemm_dtype: torch.dtype | None = None
) -> torch.dtype:
    """The dtype the KV cache stores: the activation dtype (named, or auto), or bf16 under float32
    activations on the CPU, where the C++ kernels round K/V into bf16 as they write and widen
    them back to float32 as they read (and the torch paths convert likewise). auto picks bf16
    there when the GEMMs multiply in bf16 (pick_cpu_gemm_dtype): K and V are then products of
    bf16 GEMMs, and the cache holds twice the tokens and reads half the bytes. int8 (rows
    quantised with a scale each, engine/attention/kv_quant.py) is the CPU's float32 engines' too,
    asked for by name only: it is lossy beyond bf16. Any other pairing has no read path and is
    refused by name."""
    if name == "auto":
        bf16_gemms = gemm_dtype == torch.bfloat16 and dtype == torch.float32
        return torch.bfloat16 if device.type == "cpu" and bf16_gemms else dtype
    if name in _DTYPES and _DTYPES[name] == dtype:
        return dtype
    if device.type == "cpu" and dtype == torch.float32 and name in ("bfloat16", "int8"):
        return torch.bfloat16 if name == "bfloat16" else torch.int8
    raise ConfigError(
        f"kv_cache_dtype {name} is not supported with {str(dtype).removeprefix('torch.')} "
        f"activations on {device.type}: use auto (the activation dtype)"
        + (", or bfloat16 or int8 with float32 activations" if device.type == "cpu" else "")
    )
