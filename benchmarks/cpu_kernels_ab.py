"""The C++ CPU kernels alone, on two or more checkouts, their builds alternating pass by pass in
one process: the paged attention kernel and SwiGLU's SiLU-and-multiply.

    python -m benchmarks.cpu_kernels_ab --checkout /path/to/old --checkout . [--rounds 30]

A change to engine/kernels/csrc moves prefill or decode attention by a few per cent, which a whole
run of workload A (where attention is ~15-25 % of the time) cannot tell from a shared machine's
drift. This times the kernels on workload A's shapes instead. Attention: `prefill`, the rows of
its first 32 prompts each with its causal context, as a step of prefill chunks hands them to the
kernel; and `decode`, its 64 sequences one token each after 64 generated, over blocks in random
pool order. Both over 30 layers of SmolLM2-135M's cache (3 KV heads of 64, 9 query heads, block
16), with a bf16 and an int8 cache and a bf16 output (what `auto` runs). SiLU: a full prefill
step's 2,048 rows and a decode step's 64, of the bf16 [gate | up] product (intermediate 1,536),
30 layers.

Each checkout builds its kernels (its own sources, its own build directory); then one process
loads every build and, shape by shape, runs a pass of 30 layers with each in turn, the order
reversed every round (A B, B A, ...). Drift that whole processes minutes apart would each see
differently (passes of one build ranged over +-15 % on this kind of machine) hits the builds of
one round alike, so each build is summarised by the median over rounds of its pass time over the
first build's in the same round. (Until the SiLU shapes came, this was
`benchmarks/attention_kernel.py`, a process per checkout and run; it recorded
benchmarks/results/prefetch_level_ab.json.)
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

from benchmarks.machine import git_commit, machine_info

SETTINGS = {
    "model_shape": "SmolLM2-135M: 30 layers, 9 query heads, 3 KV heads, head_dim 64",
    "block_size": 16,
    "prefill": "workload A (seed 0): its first 32 prompts' rows, each with its causal context",
    "decode": "workload A (seed 0): 64 sequences at prompt + 64 tokens, blocks in random order",
    "silu": "bf16 [rows, 2 x 1536] -> [rows, 1536]; 2,048 rows (prefill), 64 rows (decode)",
    "output": "bfloat16 (the input of a bf16 o_proj, as `auto` runs)",
    "passes": "per shape: 2 warm-up passes per build, then `rounds` rounds of one pass per build",
    "threads": "torch's default: one per core",
}

# Prints the path of the kernel build a checkout's `engine` loads (building it if need be).
_BUILD = (
    "from engine.kernels.cpu_kernels import load_cpu_kernels; "
    "print(load_cpu_kernels(True).__file__)"
)

# Loads every build given on the command line and times them round by round on the same inputs.
_RUN = """
import importlib.util, json, random, sys, time
import torch
from benchmarks.workloads import workload_a
from engine.attention.kv_quant import quantize_rows

def load(path):
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[-1].split(".")[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

rounds, builds = int(sys.argv[1]), [load(p) for p in sys.argv[2:]]
LAYERS, HEADS, KV_HEADS, DIM, BLOCK, INTERMEDIATE = 30, 9, 3, 64, 16, 1536
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

def attention_shape(kind):
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

def attention_pass(kind, dtype):
    table, seq_lens, num_blocks = attention_shape(kind)
    layers = caches(num_blocks, dtype)
    query = torch.randn(seq_lens.numel(), HEADS, DIM)
    out = torch.empty(query.shape, dtype=torch.bfloat16)
    def one_pass(kernels):
        for k, v in layers:
            kernels.paged_decode(query, k, v, table, seq_lens, DIM ** -0.5, out)
    return one_pass

def silu_pass(rows):
    gate_up = [torch.randn(rows, 2 * INTERMEDIATE).bfloat16() for _ in range(LAYERS)]
    def one_pass(kernels):
        for product in gate_up:
            kernels.silu_and_mul(product)
    return one_pass

def timed_rounds(one_pass):
    for kernels in builds:
        one_pass(kernels)
        one_pass(kernels)
    times = [[] for _ in builds]
    for r in range(rounds):
        order = range(len(builds)) if r % 2 == 0 else reversed(range(len(builds)))
        for b in order:
            started = time.perf_counter()
            one_pass(builds[b])
            times[b].append((time.perf_counter() - started) * 1000)
    return times

shapes = {}
for kind in ("prefill", "decode"):
    for name, dtype in (("bf16", torch.bfloat16), ("int8", torch.int8)):
        shapes[f"{kind} {name}"] = attention_pass(kind, dtype)
for kind, rows in (("prefill", 2048), ("decode", 64)):
    shapes[f"silu {kind}"] = silu_pass(rows)
result = {}
for name, one_pass in shapes.items():
    result[name] = timed_rounds(one_pass)
    print(name, "done", file=sys.stderr, flush=True)
print(json.dumps(result))
"""


def build(checkout: Path) -> str:
    """The kernel build `checkout`'s sources make (its path), built by that checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-c", _BUILD]
    result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{checkout}: the kernel build failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


def run_rounds(builds: list[str], rounds: int) -> dict[str, list[list[float]]]:
    """Per shape, per build, each round's pass time in ms (this checkout's workload code)."""
    here = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(here)}
    command = [sys.executable, "-c", _RUN, str(rounds), *builds]
    result = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the timed run failed:\n{result.stderr[-3000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def summarize(times: dict[str, list[list[float]]], checkouts: list[Path]) -> list[dict[str, Any]]:
    """Per checkout and shape: the median pass time, and the median, min and max over rounds of
    its pass time over the first checkout's in the same round."""
    summary = []
    for index, checkout in enumerate(checkouts):
        entry: dict[str, Any] = {"checkout": str(checkout), "commit": git_commit(checkout)}
        for shape, per_build in times.items():
            ratios = [t / first for t, first in zip(per_build[index], per_build[0], strict=True)]
            entry[shape] = {
                "median_ms": statistics.median(per_build[index]),
                "vs_first": statistics.median(ratios),
                "vs_first_min": min(ratios),
                "vs_first_max": max(ratios),
                "rounds": len(ratios),
            }
        summary.append(entry)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout]
    builds = [build(checkout) for checkout in checkouts]
    times = run_rounds(builds, args.rounds)
    summary = summarize(times, checkouts)
    for entry in summary:
        shown = ", ".join(
            f"{k} {v['median_ms']:.1f} ms ({v['vs_first']:.3f}x)"
            for k, v in entry.items()
            if isinstance(v, dict)
        )
        print(f"{entry['checkout']} ({entry['commit']}): {shown}")
    if args.json is not None:
        result = {
            "benchmark": "cpu_kernels_ab",
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "machine": machine_info(),
            "settings": SETTINGS | {"rounds": args.rounds},
            "builds": dict(zip(map(str, checkouts), builds, strict=True)),
            "summary": summary,
            "pass_ms": times,
        }
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
