"""Cold start, stage by stage: `pagedock serve` started afresh again and again, each start's
stages (GET /startup) and its time to first token from the moment the process was spawned.

    python benchmarks/cold_start.py [--repetitions 5] [--arm NAME=FLAGS ...]

Each run spawns `pagedock serve --model smollm2-135m-instruct` in a new process, polls /health
every 20 ms, sends one streamed completion as soon as it answers (a request the router held
while no engine was up), reads /startup once the request is done, and stops the server. The
arms (by default `before`: every start-up speed-up off, `after`: the defaults) run interleaved
(A B A B ...), so a shared machine's drift lands on both. The caches stay as they are between
runs, as on a node where a pod of the same model ran before (the weight cache and the kernel
build exist); a run before the measured ones (not counted) fills them. Writes
benchmarks/results/cold_start_stages.{json,md} (the stages' medians and ranges, every run).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import git_commit, machine_info
from benchmarks.repetitions import interleaved_order, spread
from benchmarks.servers import REPO_ROOT, free_port
from engine.startup_stages import STAGES as ENGINE_STAGES

HERE = Path(__file__).resolve().parent
MODEL = "smollm2-135m-instruct"
# The start-up speed-ups, each off (EngineConfig fields; docs/server.md#cold-start).
SPEED_UPS_OFF = [
    "--no-cpu-kernels-cache",
    "--weights-load-strategy",
    "copy",
    "--kv-cache-prefault",
]
DEFAULT_ARMS = {"before": SPEED_UPS_OFF, "after": []}
# The engine's stages after the process start itself (its own list, engine/startup_stages.py).
STAGES = ENGINE_STAGES[1:]
# Figures of a run besides the stages, all seconds from the spawn.
SPAWN_FIGURES = ("health_ok", "first_token")
POLL_S = 0.02


def run_once(flags: list[str], model: str, log: Path, timeout_s: float) -> dict[str, Any]:
    """One cold start: spawn, wait for /health, one streamed request, /startup, stop."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "pagedock", "serve", "--model", model, "--port", str(port)]
    command += ["--log-level", "warning", *flags]
    with log.open("ab") as out:
        spawned_wall, spawned = time.time(), time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        health_ok = _wait_healthy(url, process, spawned + timeout_s) - spawned
        first_token = _first_token(url) - spawned
        report = httpx.get(f"{url}/startup", timeout=10).json()
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return {
        "stages": report["stages"],
        "spawn_to_process_start_s": round(report["process_start_time"] - spawned_wall, 3),
        "health_ok": round(health_ok, 3),
        "first_token": round(first_token, 3),
    }


def _wait_healthy(url: str, process: subprocess.Popen[bytes], deadline: float) -> float:
    """The perf_counter time /health first answered 200."""
    with httpx.Client(timeout=1) as client:
        while time.perf_counter() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"pagedock serve exited with {process.returncode}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return time.perf_counter()
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S)
    raise TimeoutError(f"{url} did not answer /health in time")


def _first_token(url: str) -> float:
    """Send one streamed completion; the perf_counter time its first text arrived (the stream
    is read to its end, so the request is served when this returns)."""
    body = {"prompt": "The capital of France is", "max_tokens": 16, "stream": True}
    first = None
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: {") and _has_text(line[6:]):
                first = time.perf_counter()
    if first is None:
        raise RuntimeError("the completion streamed no text")
    return first


def _has_text(chunk: str) -> bool:
    return any(choice.get("text") for choice in json.loads(chunk).get("choices", []))


def summarize(runs: list[dict[str, Any]], arms: list[str]) -> dict[str, dict[str, Any]]:
    """Per arm, per figure (each stage, health_ok, first_token): median, min, max, n."""
    summary: dict[str, dict[str, Any]] = {}
    for arm in arms:
        mine = [run for run in runs if run["arm"] == arm and not run["discarded"]]
        figures: dict[str, Any] = {}
        for name in (*STAGES, *SPAWN_FIGURES):
            values = [_figure(run, name) for run in mine]
            found = [v for v in values if v is not None]
            if found:
                figures[name] = spread(found).__dict__
        summary[arm] = figures
    return summary


def _figure(run: dict[str, Any], name: str) -> float | None:
    value = run["stages"].get(name) if name in STAGES else run.get(name)
    return None if value is None else float(value)


def markdown(result: dict[str, Any]) -> str:
    """The table: one row per stage (seconds since the process started), one column per arm."""
    arms = list(result["arms"])
    machine, settings = result["machine"], result["settings"]
    what = settings.get("source") or (
        f"Cold start of `pagedock serve --model {settings['model']}` ({settings['repetitions']} "
        "interleaved repetitions per arm, fresh processes, caches warm)"
    )
    lines = [
        f"{what}, {result['date']}, {machine['cpu_model']}, {machine['cores_usable']} cores, "
        f"pagedock {result['git_commit']}. Seconds from the process's start; median (min–max).",
        "",
        "| stage | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    rows = [(stage, stage) for stage in STAGES] + [
        ("health_ok", "/health answered (from spawn)"),
        ("first_token", "time to first token (from spawn; e2e: from the request)"),
    ]
    for name, label in rows:
        cells = [_cell(result["summary"][arm].get(name)) for arm in arms]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Arms: "
        + "; ".join(f"`{a}`: {shlex.join(f) or '(defaults)'}" for a, f in result["arms"].items()),
    ]
    return "\n".join(lines) + "\n"


def _cell(figure: dict[str, Any] | None) -> str:
    if figure is None:
        return "–"
    return f"{figure['median']:.2f} ({figure['min']:.2f}–{figure['max']:.2f})"


def parse_arms(specs: list[str]) -> dict[str, list[str]]:
    """`NAME=FLAGS` (FLAGS split as a shell would) per arm; the default arms when none."""
    if not specs:
        return dict(DEFAULT_ARMS)
    arms = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not name:
            raise SystemExit(f"--arm takes NAME=FLAGS, got {spec!r}")
        arms[name] = shlex.split(flags)
    return arms


def e2e_runs(path: Path) -> list[dict[str, Any]]:
    """The JSON lines tests/e2e/test_scale_from_zero.py appends (PAGEDOCK_E2E_COLD_START_OUT), as
    runs: its time to first token is from the request sent while no engine existed."""
    runs = []
    for rep, line in enumerate(path.read_text().splitlines()):
        e2e = json.loads(line)
        runs.append(
            {
                "arm": e2e["arm"],
                "repetition": rep,
                "discarded": False,
                "stages": e2e["stages"],
                "first_token": e2e["scale_from_zero_ttft_s"],
                "pod": e2e["pod"],
            }
        )
    return runs


def run(args: argparse.Namespace, arms: dict[str, list[str]]) -> list[dict[str, Any]]:
    runs = []
    warm_up = [(-1, arm) for arm in arms] if args.warm_up else []
    for rep, arm in warm_up + interleaved_order(list(arms), args.repetitions):
        figures = run_once(arms[arm], args.model, args.log, args.timeout_s)
        runs.append({"arm": arm, "repetition": rep, "discarded": rep < 0, **figures})
        print(json.dumps(runs[-1]), flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--arm", action="append", default=[], metavar="NAME=FLAGS")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cold_start_stages.json")
    parser.add_argument("--log", type=Path, default=Path("/tmp/pagedock-cold-start.log"))
    parser.add_argument("--from-e2e", type=Path, metavar="JSONL", help="tabulate e2e runs instead")
    args = parser.parse_args()
    arms = parse_arms(args.arm)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    if args.from_e2e:
        runs = e2e_runs(args.from_e2e)
        names = sorted(
            {r["arm"] for r in runs}, key=lambda a: (a not in DEFAULT_ARMS, a != "before")
        )
        arms = {arm: DEFAULT_ARMS.get(arm, []) for arm in names}
    else:
        runs = run(args, arms)
    result = {
        "benchmark": "cold_start",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "git_commit": git_commit(REPO_ROOT),
        "machine": machine_info(),
        "settings": {
            "model": args.model,
            "repetitions": args.repetitions,
            "warm_up_run_per_arm": args.warm_up,
            "request": "one streamed completion, 16 tokens, sent once /health answers",
            "health_poll_s": POLL_S,
            "caches": "as found (weight cache, kernel build), filled by the warm-up runs",
            "note": args.note,
            "source": None
            if args.from_e2e is None
            else "Scale from zero in the e2e (tests/e2e/test_scale_from_zero.py): the engine pod "
            "a request brought back from zero replicas, node cache warm",
        },
        "arms": arms,
        "summary": summarize(runs, list(arms)),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
