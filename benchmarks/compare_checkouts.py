"""Workload A throughput of two or more pagedock checkouts, interleaved (A B A B A B).

    python -m benchmarks.compare_checkouts --checkout /path/to/old --checkout . [--repeats 3]
    python -m benchmarks.compare_checkouts --online --checkout /path/to/old --checkout .

Each run is a fresh process whose `engine` comes from that checkout (PYTHONPATH points at it, ahead
of the installed one), with the same model, workload, threads and engine settings; a warm-up of
prompts of its own (sharing no prefix with the measured ones) runs first in each process. Prints
every run and each checkout's median and spread; writes the runs and the machine to --json.
With --online each run is that checkout's own `benchmarks/online_throughput.py` (its server, the
load generator at --concurrency, streaming), and the figure compared is output tok/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.machine import git_commit, machine_info

ENGINE_SETTINGS = (
    "LLM() defaults but the dtype (2 GiB KV, max_num_seqs 256, 2048-token budget, block 16, prefix"
    " caching on)"
)
ENGINE_SETTINGS_ONLINE = (
    "each checkout's `pagedock serve` defaults, as its benchmarks/online_throughput.py starts it "
    "(2 GiB KV, max_num_seqs 256, 2048-token budget, block 16, prefix caching on, max_waiting "
    "1024); load generator streaming, 64 requests of workload A"
)

# Runs inside the checkout's process: only the offline API, which every checkout has.
_RUN = """
import json, sys, time
from benchmarks.workloads import workload_a
from engine import LLM, SamplingParams

model, num_requests, seed, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
llm = LLM(model=model, dtype=dtype, device="cpu")
vocab_size = llm.engine.model_config.vocab_size
workload = workload_a(vocab_size, num_requests=num_requests, seed=seed)
warmup = workload_a(vocab_size, num_requests=4, seed=seed, content_seed=seed + 1000)
warmup_params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
llm.generate(warmup.prompts, warmup_params, use_tqdm=False)
params = SamplingParams(max_tokens=workload.max_tokens, temperature=0.0, ignore_eos=True)
started = time.perf_counter()
outs = llm.generate(workload.prompts, params, use_tqdm=False)
elapsed = time.perf_counter() - started
generated = sum(len(o.token_ids) for o in outs)
record = {"elapsed_s": elapsed, "generated_tokens": generated}
print(json.dumps({**record, "generated_tok_s": generated / elapsed}))
"""


def run_once(
    checkout: Path, model: str, num_requests: int, seed: int, dtype: str
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    result = subprocess.run(
        [sys.executable, "-c", _RUN, model, str(num_requests), str(seed), dtype],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"{checkout}: the run failed:\n{result.stderr[-3000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def run_online(checkout: Path, concurrency: int, num_requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "online.json"
        script = checkout / "benchmarks" / "online_throughput.py"
        command = [sys.executable, str(script), "--skip-offline", "--concurrency", str(concurrency)]
        command += ["--num-requests", str(num_requests), "--json", str(out)]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{checkout}: the online run failed:\n{result.stderr[-3000:]}")
        run = json.loads(out.read_text())["online"][0]
    keys = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "num_errors")
    return {key: run[key] for key in keys} | {"generated_tok_s": run["output_tok_s"]}


def run_interleaved(
    checkouts: list[Path],
    repeats: int,
    run: Callable[[Path], dict[str, Any]],
    show: Callable[[dict[str, Any]], str],
) -> list[dict[str, Any]]:
    """Each checkout once per repeat, in turn (A B A B A B), so that drift on a shared machine
    hits every checkout alike; each run printed as `show` puts it, and tagged with its checkout
    and repeat."""
    runs = []
    for repeat in range(repeats):
        for checkout in checkouts:
            record = run(checkout) | {"checkout": str(checkout), "repeat": repeat}
            record["finished_at"] = time.time()
            print(f"{checkout.name} #{repeat}: {show(record)}", flush=True)
            runs.append(record)
    return runs


def summarize(runs: list[dict[str, Any]], checkouts: list[Path]) -> list[dict[str, Any]]:
    summary = []
    for checkout in checkouts:
        rates = [r["generated_tok_s"] for r in runs if r["checkout"] == str(checkout)]
        summary.append(
            {
                "checkout": str(checkout),
                "commit": git_commit(checkout),
                "median_tok_s": statistics.median(rates),
                "min_tok_s": min(rates),
                "max_tok_s": max(rates),
                "runs": len(rates),
            }
        )
    base = summary[0]["median_tok_s"]
    for entry in summary:
        entry["median_vs_first"] = entry["median_tok_s"] / base
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", required=True)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--online", action="store_true", help="pagedock serve + load generator")
    parser.add_argument("--concurrency", type=int, default=32, help="--online: clients at once")
    parser.add_argument("--dtype", default="float32", help="offline: LLM(dtype=...), e.g. auto")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout]

    def run(checkout: Path) -> dict[str, Any]:
        if args.online:
            return run_online(checkout, args.concurrency, args.num_requests)
        return run_once(checkout, args.model, args.num_requests, 0, args.dtype)

    runs = run_interleaved(
        checkouts, args.repeats, run, lambda r: f"{r['generated_tok_s']:.1f} generated tok/s"
    )
    summary = summarize(runs, checkouts)
    for entry in summary:
        print(
            f"{entry['checkout']} ({entry['commit']}): median {entry['median_tok_s']:.1f} tok/s "
            f"[{entry['min_tok_s']:.1f}, {entry['max_tok_s']:.1f}], "
            f"{entry['median_vs_first']:.3f}x the first"
        )
    if args.json is not None:
        settings = {
            "mode": "online" if args.online else "offline",
            "concurrency": args.concurrency if args.online else None,
            "model": args.model,
            "dtype": None if args.online else args.dtype,
            "device": "cpu",
            "num_requests": args.num_requests,
            "repeats": args.repeats,
            "engine": ENGINE_SETTINGS_ONLINE if args.online else ENGINE_SETTINGS,
        }
        result = {"machine": machine_info(), "settings": settings, "summary": summary, "runs": runs}
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
