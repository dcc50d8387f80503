"""pagedock's steps with freed host memory kept mapped (engine/worker/host_memory.py) and with
glibc's default, which hands it back to the kernel: page faults, kernel CPU time and step time.

    python benchmarks/host_memory_ab.py [--repetitions 3] [--steps 12]

Each repetition runs both settings, each in a fresh process, the order swapped every repetition.
A process loads SmolLM2-135M (dtype auto, 2 threads), warms up on two steps of each kind, then
times `--steps` steps of each kind: a full 2,048-token prefill (four 512-token prompts), a quarter
step (one 512-token prompt beside 30 running decodes) and a step of those 30 decodes alone.
Writes benchmarks/results/host_memory_ab.json.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.comparison_report import ratios_between, summarize_systems
from benchmarks.machine import git_commit, machine_info

HERE = Path(__file__).resolve().parent
SETTINGS = ["kept", "glibc default"]
STEPS = ["prefill 2048", "512 beside 30 decodes", "30 decodes"]
FIGURES = [f"{step} {what}" for step in STEPS for what in ("ms", "page faults", "kernel ms")]


def child(setting: str, num_steps: int) -> dict[str, float]:
    """One process's figures: per step kind, the median wall ms, page faults and kernel ms."""
    import engine.runtime.llm_engine as llm_engine
    from engine.config import EngineConfig
    from engine.inputs.sampling_params import SamplingParams

    if setting != "kept":
        llm_engine.keep_freed_memory = lambda: False  # type: ignore[assignment]  # glibc as is
    engine = llm_engine.LLMEngine(
        EngineConfig(model="smollm2-135m-instruct", kv_cache_memory="2GiB", num_threads=2)
    )
    rng = random.Random(0)

    def add(count: int, length: int, max_tokens: int = 1) -> None:
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        for _ in range(count):
            prompt = [rng.randrange(1000, 40000) for _ in range(length)]
            engine.add_request(f"r{rng.random()}", prompt, params)

    def finish_all() -> None:
        while engine.has_unfinished_requests():
            engine.step_core()

    kinds: dict[str, Callable[[], None]] = {
        "prefill 2048": lambda: add(4, 512),
        "512 beside 30 decodes": lambda: add(1, 512),
        "30 decodes": lambda: None,
    }
    figures: dict[str, float] = {}
    for kind, prepare in kinds.items():
        if kind != "prefill 2048" and not engine.has_unfinished_requests():
            add(30, 300, max_tokens=4_000)  # the running decodes of the next two kinds
            for _ in range(8):
                engine.step_core()
        samples = [_timed_step(engine, prepare) for _ in range(num_steps + 2)][2:]
        for i, what in enumerate(("ms", "page faults", "kernel ms")):
            figures[f"{kind} {what}"] = statistics.median(s[i] for s in samples)
        if kind == "prefill 2048":
            finish_all()
    return figures


def _timed_step(engine: Any, prepare: Callable[[], None]) -> tuple[float, float, float]:
    prepare()
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    engine.step_core()
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    return (
        wall * 1000,
        after.ru_minflt - before.ru_minflt,
        (after.ru_stime - before.ru_stime) * 1000,
    )


def run_pairs(repetitions: int, num_steps: int) -> list[dict[str, Any]]:
    runs = []
    for rep in range(repetitions):
        for setting in SETTINGS if rep % 2 == 0 else list(reversed(SETTINGS)):
            command = [sys.executable, __file__, "--child", setting, "--steps", str(num_steps)]
            out = subprocess.run(command, capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                raise SystemExit(f"host_memory_ab: {setting} failed:\n{out.stderr[-3000:]}")
            runs.append({"system": setting, "repetition": rep, **json.loads(out.stdout)})
            print(json.dumps(runs[-1]), flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--child", choices=SETTINGS)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "host_memory_ab.json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = run_pairs(args.repetitions, args.steps)
    result = {
        "what": "pagedock auto, SmolLM2-135M, 2 threads: steps with freed host memory kept "
        "mapped against glibc's default; medians of each process's steps, fresh processes, "
        "interleaved",
        "started": started,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "steps_per_kind": args.steps,
        "summary": summarize_systems(runs, SETTINGS, FIGURES),
        "ratios": [
            r
            for step in STEPS
            for r in ratios_between(runs, [("kept", "glibc default")], f"{step} ms")
        ],
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1), json.dumps(result["ratios"], indent=1))


if __name__ == "__main__":
    main()
