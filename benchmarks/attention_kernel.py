"""The C++ paged attention kernel alone, on two or more checkouts, interleaved (A B A B A B).

    python -m benchmarks.attention_kernel --checkout /path/to/old --checkout . [--repeats 5]

A change to engine/kernels/csrc moves prefill or decode attention by a few per cent, which a whole
run of workload A (where attention is ~15-25 % of the time) cannot tell from a shared machine's
drift. This times the kernel on workload A's shapes instead: `prefill`, the rows of its first 32
prompts each with its causal context, as a step of prefill chunks hands them to the kernel; and
`decode`, its 64 sequences one token each after 64 generated, over blocks in random pool order.
Both over 30 layers of SmolLM2-135M's cache (3 KV heads of 64, 9 query heads, block 16), with a
bf16 and an int8 cache and a bf16 output (what `auto` runs). Each run is a fresh process whose
`engine` (and so whose kernel build) comes from that checkout; it prints each shape's fastest and
median pass of 30 layers, and each checkout's median of those against the first checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.compare_checkouts import run_interleaved
from benchmarks.machine import git_commit, machine_info

SETTINGS = {
    "model_shape": "SmolLM2-135M: 30 layers, 9 query heads, 3 KV heads, head_dim 64",
    "block_size": 16,
    "prefill": "workload A (seed 0): its first 32 prompts' rows, each with its causal context",
    "decode": "workload A (seed 0): 64 sequences at prompt + 64 tokens, blocks in random order",
    "output": "bfloat16 (the input of a bf16 o_proj, as `auto` runs)",
    "passes": "2 warm-up passes, then 9 timed passes of 30 layers per shape and process",
}

# Runs inside the checkout's process: the kernel module that checkout builds.
_RUN = """
import json, random, statistics, sys, time
import torch
from benchmarks.workloads import workload_a
from engine.attention.kv_quant import quantize_rows
from engine.kernels.cpu_kernels import load_cpu_kernels

kernels = load_cpu_kernels(True)
LAYERS, HEADS, KV_HEADS, DIM, BLOCK = 30, 9, 3, 64, 16
prompts = [len(p) for p in workload_a(49152, 64).prompts]
rng = random.Random(0)
torch.manual_seed(0)

def tables_for(lens):
    blocks = [(n + BLOCK - 1) // BLOCK for n in lens]
    order = list(range(sum(blocks)))
    rng.shuffle(order)
    table = torch.zeros(len(lens), max(blocks), dtype=torch.int32)
    used = 0
    for s, n in enumerate(blocks):
        table[s, :n] = torch.tensor(order[used:used + n], dtype=torch.int32)
        used += n
    return table, used

def caches(num_blocks, dtype):
    rows = torch.randn(LAYERS, 2, num_blocks, BLOCK, KV_HEADS, DIM)
    rows = quantize_rows(rows) if dtype == torch.int8 else rows.to(dtype)
    return [(rows[layer, 0].contiguous(), rows[layer, 1].contiguous()) for layer in range(LAYERS)]

def shape(kind):
    if kind == "prefill":
        lens = prompts[:32]
        table, num_blocks = tables_for(lens)
        table = torch.cat([table[s:s + 1].expand(n, -1) for s, n in enumerate(lens)]).contiguous()
        seq_lens = torch.cat([torch.arange(1, n + 1, dtype=torch.int32) for n in lens])
    else:
        lens = [n + 64 for n in prompts]
        table, num_blocks = tables_for(lens)
        seq_lens = torch.tensor(lens, dtype=torch.int32)
    return table, seq_lens, num_blocks

def time_passes(table, seq_lens, layers):
    query = torch.randn(seq_lens.numel(), HEADS, DIM)
    out = torch.empty(query.shape, dtype=torch.bfloat16)
    def one_pass():
        started = time.perf_counter()
        for k, v in layers:
            kernels.paged_decode(query, k, v, table, seq_lens, DIM ** -0.5, out)
        return (time.perf_counter() - started) * 1000
    for _ in range(2):
        one_pass()
    passes = [one_pass() for _ in range(9)]
    return {"min_ms": min(passes), "median_ms": statistics.median(passes)}

result = {}
for kind in ("prefill", "decode"):
    table, seq_lens, num_blocks = shape(kind)
    for name, dtype in (("bf16", torch.bfloat16), ("int8", torch.int8)):
        result[f"{kind} {name}"] = time_passes(table, seq_lens, caches(num_blocks, dtype))
print(json.dumps(result))
"""


def run_once(checkout: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-c", _RUN]
    result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{checkout}: the run failed:\n{result.stderr[-3000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def summarize(runs: list[dict[str, Any]], checkouts: list[Path]) -> list[dict[str, Any]]:
    """Per checkout and shape: the median over runs of each run's fastest pass, its spread, and
    that median against the first checkout's."""
    shapes = list(runs[0]["passes"])
    summary = []
    for checkout in checkouts:
        mine = [r["passes"] for r in runs if r["checkout"] == str(checkout)]
        entry: dict[str, Any] = {"checkout": str(checkout), "commit": git_commit(checkout)}
        for name in shapes:
            fastest = [p[name]["min_ms"] for p in mine]
            entry[name] = {
                "median_ms": statistics.median(fastest),
                "min_ms": min(fastest),
                "max_ms": max(fastest),
                "runs": len(fastest),
            }
        summary.append(entry)
    for entry in summary:
        for name in shapes:
            entry[name]["vs_first"] = entry[name]["median_ms"] / summary[0][name]["median_ms"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout]
    runs = run_interleaved(
        checkouts,
        args.repeats,
        lambda checkout: {"passes": run_once(checkout)},
        lambda r: ", ".join(f"{k} {v['min_ms']:.1f} ms" for k, v in r["passes"].items()),
    )
    summary = summarize(runs, checkouts)
    for entry in summary:
        shown = ", ".join(
            f"{k} {v['median_ms']:.1f} ms ({v['vs_first']:.3f}x)"
            for k, v in entry.items()
            if isinstance(v, dict)
        )
        print(f"{entry['checkout']} ({entry['commit']}): {shown}")
    if args.json is not None:
        result = {
            "benchmark": "attention_kernel",
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "machine": machine_info(),
            "settings": SETTINGS,
            "summary": summary,
            "runs": runs,
        }
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
