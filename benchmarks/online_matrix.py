"""Issue 40's online matrix: concurrency x prompt mix, pagedock at its defaults against vLLM (at
its defaults and at its best chunked-prefill knobs) and llama.cpp's llama-server, streaming.

    python benchmarks/online_matrix.py [--concurrency 8 32 64] [--mixes chat A long]
        [--cells 1:A ...] [--arms pagedock vllm vllm-best llama-server] [--repetitions 2]
        [--vllm-grid max_num_batched_tokens=512,long_prefill_token_threshold=256 ...]
        [--vllm-best-knobs KEY=VALUE ...] [--lock /tmp/bench.lock]

Cells and arms: benchmarks/matrix_cells.py, benchmarks/matrix_arms.py. Every arm gets the same
requests per cell and repetition, a fixed output length (ignore_eos) and the same KV bytes.

Servers: one at a time (idle neighbours cost pagedock ~15 % in online_vs_vllm.py's run). A
server lives for one repetition of one arm and serves every cell of it, in the same order:
vLLM's start-up (~1-2 min, it compiles afresh each time) per cell would cost more than the
matrix. Arms are interleaved per repetition (A B C D A B C D); each cell's requests have content
of their own, so no cell hits the prefix cache an earlier one filled; the server is warmed up
on requests of its own (each mix) before the first cell. `--lock FILE` holds the machine's
benchmark lock (flock) for each repetition, every arm in it, and for the grid, so no other
benchmark shares the cores meanwhile; others may run between repetitions.

vllm-best: `--vllm-best-knobs`, or the best of `--vllm-grid` (each candidate a vLLM server of its
own, run once on `--grid-cell`), by `--grid-objective`; the grid's runs are recorded.
Writes benchmarks/results/online_matrix_<commit>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import SMALLEST_BLOCK, SMOLLM2_VOCAB, parse_knobs
from benchmarks.load_generator import RequestResult
from benchmarks.machine import git_commit
from benchmarks.matrix_arms import (
    ARMS,
    BEST_VLLM,
    ArmSettings,
    bench_lock,
    parse_arm,
    start_arm,
)
from benchmarks.matrix_cells import (
    PROMPT_MIXES,
    Cell,
    cell_workload,
    matrix_cells,
    num_requests,
    parse_cell,
)
from benchmarks.matrix_report import write_matrix_results
from benchmarks.online_vs_vllm import measure, warm_up
from benchmarks.result_header import ResultHeader
from benchmarks.servers import Server
from benchmarks.workloads import check_no_shared_block, synthetic_workload

HERE = Path(__file__).resolve().parent
WARMUP_CONTENT_SEED = 2_000


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure_cell(
    server: Server, arm: str, rep: int, index: int, cell: Cell, args: argparse.Namespace
) -> tuple[dict[str, Any], list[RequestResult]]:
    count = num_requests(cell, args.waves, args.min_requests)
    workload = cell_workload(cell, index, rep, SMOLLM2_VOCAB, count, args.max_tokens)
    before = load_average()
    figures, results = measure(server, workload, cell.concurrency)
    run = {
        "system": arm,
        "cell": cell.key,
        "concurrency": cell.concurrency,
        "mix": cell.mix,
        "repetition": rep,
        "prompt_tokens": workload.num_prompt_tokens,
        "output_tokens": sum(r.num_output_tokens for r in results if r.ok),
        "expected_output_tokens": workload.num_generated_tokens,
        "load_average_before": before,
        "load_average_after": load_average(),
        **figures,
    }
    print(json.dumps({k: v for k, v in run.items() if k != "errors"}), flush=True)
    return run, results


def serve_cells(
    arm: str, rep: int, cells: list[Cell], args: argparse.Namespace, knobs: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], list[list[RequestResult]], dict[str, Any]]:
    """One server of `arm`: started, warmed up, every cell once, stopped."""
    log = args.log_dir / f"{arm}_{rep}.log"
    runs, results = [], []
    server = start_arm(arm, args.arm_settings, log, knobs)
    try:
        warm_up(server, args.warmup_prompts)
        for cell in cells:
            run, got = measure_cell(server, arm, rep, args.cells.index(cell), cell, args)
            runs.append(run)
            results.append(got)
    finally:
        memory = {"system": arm, "repetition": rep, **server.stop()}
    return runs, results, memory


def run_matrix(args: argparse.Namespace, save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Every (repetition, arm), in interleaved order; each serves every cell. What has run is
    saved after each server, and no server starts past `--stop-after-s`."""
    matrix: dict[str, Any] = {"runs": [], "pooled": {}, "memory": [], "failures": []}
    matrix["stopped_early"] = False
    for rep in range(args.repetitions):
        with bench_lock(args.lock):
            for arm in args.arms:
                if time.monotonic() - args.wall_start > args.stop_after_s:
                    matrix["stopped_early"] = True
                    return matrix
                try:
                    got_runs, got_results, mem = serve_cells(arm, rep, args.cells, args, None)
                except (RuntimeError, TimeoutError, OSError) as e:  # a server that fails
                    print(f"{arm} #{rep} failed: {e}", flush=True)  # leaves the others' runs
                    matrix["failures"].append({"system": arm, "repetition": rep, "error": str(e)})
                    continue
                matrix["runs"] += got_runs
                for run, results in zip(got_runs, got_results, strict=True):
                    matrix["pooled"].setdefault(f"{run['cell']} {arm}", []).extend(results)
                matrix["memory"].append(mem)
                save(matrix)
    return matrix


def run_grid(args: argparse.Namespace) -> dict[str, Any]:
    """Each candidate of vLLM's knobs once on the grid cell; the best by the objective."""
    cell = args.grid_cell
    saved = args.cells
    args.cells = [cell]  # the grid's content: repetition index past the matrix's own
    candidates = []
    try:
        with bench_lock(args.lock):
            for i, knobs in enumerate(args.vllm_grid):
                runs, _, mem = serve_cells(BEST_VLLM, args.repetitions + i, [cell], args, knobs)
                candidates.append({"knobs": knobs, "run": runs[0], "memory": mem})
    finally:
        args.cells = saved
    lower_is_better = args.grid_objective.endswith("_ms")
    ok = [c for c in candidates if c["run"]["num_errors"] == 0]
    if not ok:
        raise SystemExit("online_matrix: every grid candidate had errors")
    best = (min if lower_is_better else max)(ok, key=lambda c: c["run"][args.grid_objective])
    return {
        "cell": cell.key,
        "objective": args.grid_objective,
        "candidates": candidates,
        "best_knobs": best["knobs"],
    }


def warmup_prompts(args: argparse.Namespace) -> list[list[int]]:
    """`--warmup-requests` of every mix in the matrix, sharing no block with a measured one."""
    mixes = sorted({c.mix for c in [*args.cells, args.grid_cell]})
    prompts = []
    for i, mix in enumerate(mixes):
        w = synthetic_workload(
            mix,
            SMOLLM2_VOCAB,
            args.warmup_requests,
            PROMPT_MIXES[mix],
            16,
            content_seed=WARMUP_CONTENT_SEED + i,
        )
        prompts += w.prompts
    for index, cell in enumerate(args.cells):
        for rep in range(args.repetitions + len(args.vllm_grid)):
            count = num_requests(cell, args.waves, args.min_requests)
            measured = cell_workload(cell, index, rep, SMOLLM2_VOCAB, count, args.max_tokens)
            check_no_shared_block(prompts, measured.prompts, SMALLEST_BLOCK)
    return prompts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--mixes", nargs="+", default=list(PROMPT_MIXES), choices=PROMPT_MIXES)
    parser.add_argument("--cells", nargs="*", metavar="C:MIX", help="instead of the product")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), type=parse_arm)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument(
        "--waves", type=int, default=2, help="requests per cell = waves x concurrency"
    )
    parser.add_argument("--min-requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128, help="generated per request")
    parser.add_argument("--warmup-requests", type=int, default=4, help="per mix, per server")
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--vllm-best-knobs", type=parse_knobs, default=None, metavar="K=V,K=V")
    parser.add_argument("--vllm-grid", type=parse_knobs, nargs="*", default=[], metavar="K=V,K=V")
    parser.add_argument("--grid-cell", type=parse_cell, default=parse_cell("32:A"))
    parser.add_argument(
        "--grid-objective",
        default="output_tok_s",
        choices=["output_tok_s", "ttft_p99_ms", "itl_p99_ms"],
    )
    parser.add_argument("--lock", type=Path, help="flock this file for each repetition, the grid")
    parser.add_argument(
        "--stop-after-s", type=float, default=float("inf"), help="start no server after this"
    )
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        args.cells = matrix_cells(args.concurrency, args.mixes, args.cells)
    except ValueError as e:
        parser.error(str(e))
    if BEST_VLLM in args.arms and args.vllm_best_knobs is None and not args.vllm_grid:
        parser.error("vllm-best needs --vllm-best-knobs or a --vllm-grid to pick them from")
    return args


def main() -> None:
    args = parse_args()
    commit = git_commit(HERE.parent)
    header = ResultHeader.begin(commit)
    args.wall_start = time.monotonic()
    args.arm_settings = ArmSettings(kv_cache_gib=args.kv_cache_gib)
    args.warmup_prompts = warmup_prompts(args)
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-matrix-"))
    print(f"logs: {args.log_dir}", flush=True)
    grid = None
    if BEST_VLLM in args.arms and args.vllm_best_knobs is None:
        grid = run_grid(args)
        args.vllm_best_knobs = grid["best_knobs"]
        print(f"vllm-best: {args.vllm_best_knobs}", flush=True)
    args.arm_settings.vllm_best_knobs = args.vllm_best_knobs or {}
    out = args.out or HERE / "results" / f"online_matrix_{commit}.json"
    matrix = run_matrix(args, lambda m: write_matrix_results(args, header, m, grid, out))
    write_matrix_results(args, header, matrix, grid, out)


if __name__ == "__main__":
    main()
