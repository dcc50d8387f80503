"""Compile every Triton attention kernel for an NVIDIA target, without a GPU or the interpreter.

Catches what TRITON_INTERPRET=1 can't (shape rules of tl.dot, types in loops, register spills):

    .venv/bin/python benchmarks/gpu/compile_check.py [--arch 90] [--dtypes fp16 bf16 fp32]

Prints registers and spill stack per kernel when the cuobjdump bundled with triton is present.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.pop("TRITON_INTERPRET", None)  # must be unset before the kernels are defined

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from engine.attention import triton_attention as tri
from engine.attention import triton_kernels as kernels

INT32_POINTERS = {"block_tables_ptr", "seq_lens_ptr", "query_start_loc_ptr"}
FP32_POINTERS = {"part_acc_ptr", "part_max_ptr", "part_sum_ptr"}


def signature(fn: Any, dtype: str) -> dict[str, str]:
    """Argument types by naming convention: *_ptr pointers, UPPER constexprs, the rest scalars."""
    sig = {}
    for name in fn.arg_names:
        if name.isupper():
            sig[name] = "constexpr"
        elif name in INT32_POINTERS:
            sig[name] = "*i32"
        elif name in FP32_POINTERS:
            sig[name] = "*fp32"
        elif name == "slot_mapping_ptr":
            sig[name] = "*i64"
        elif name.endswith("_ptr"):
            sig[name] = f"*{dtype}"
        else:
            sig[name] = "fp32" if name == "scale_log2" else "i32"
    return sig


def resources(cubin: bytes) -> str:
    cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    if not cuobjdump.exists():
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True)
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage.stdout)
    return f"registers {found[1]:>3}  stack {found[2]:>4} B" if found else ""


def cases(dtype: str) -> list[tuple[Any, dict[str, Any], int]]:
    """(kernel, constexprs, num_warps) for the configurations the wrappers launch."""
    prec = "ieee" if dtype == "fp32" else "tf32"
    out: list[tuple[Any, dict[str, Any], int]] = [
        (
            kernels.write_kv_cache_kernel,
            {"NUM_KV_HEADS": 8, "HEADS_PAD": 8, "HEAD_DIM": 128, "BLOCK_SIZE": 16},
            4,
        ),
        (kernels.merge_splits_kernel, {"HEAD_DIM": 128, "SPLITS_PAD": 8}, 4),
    ]
    for group, head_dim, block_size in [(8, 128, 16), (1, 64, 32), (4, 128, 16)]:
        common: dict[str, Any] = {"GROUP": group, "HEAD_DIM": head_dim, "BLOCK_SIZE": block_size}
        common |= {"DOT_PRECISION": prec, "INT64_OFFSETS": False}
        for split in (False, True):
            decode = common | {"GROUP_PAD": max(16, group), "BLOCK_N": tri.DECODE_BLOCK_N}
            out.append(
                (kernels.paged_decode_kernel, decode | {"SPLIT": split}, tri.DECODE_NUM_WARPS)
            )
        prefill = common | {"GROUP_PAD": group, "BLOCK_N": tri.PREFILL_BLOCK_N}
        prefill |= {"BLOCK_Q": tri.PREFILL_BLOCK_M // group}
        out.append((kernels.paged_prefill_kernel, prefill, tri.PREFILL_NUM_WARPS))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 80, 90")
    parser.add_argument("--dtypes", nargs="+", default=["fp16", "bf16", "fp32"])
    args = parser.parse_args(argv)
    target = GPUTarget("cuda", args.arch, 32)
    failures = 0
    for dtype in args.dtypes:
        for fn, constexprs, num_warps in cases(dtype):
            label = f"{fn.__name__:<24} {dtype:<4} " + " ".join(
                f"{k}={v}" for k, v in constexprs.items() if k not in ("DOT_PRECISION",)
            )
            start = time.perf_counter()
            try:
                kernel = triton.compile(
                    ASTSource(fn, signature(fn, dtype), constexprs),
                    target=target,
                    options={"num_warps": num_warps},
                )
            except Exception as e:  # report every failing configuration, then fail
                failures += 1
                print(f"FAIL {label}: {type(e).__name__}: {e}")
                continue
            took = time.perf_counter() - start
            print(f"ok   {label}  {resources(kernel.asm['cubin'])}  ({took:.1f} s)")
    print(f"{failures} failures" if failures else f"all kernels compile for sm_{args.arch}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
