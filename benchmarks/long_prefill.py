"""--long-prefill-token-threshold on the built-in model (issue 34): what a short request pays
for arriving during a long prompt, and what the cap costs the long prompt itself.

    python benchmarks/long_prefill.py                         # the real run (clean commit)
    python benchmarks/long_prefill.py --model /tmp/tiny --rounds 1 --repetitions 1 \\
        --allow-dirty --out /tmp/long_prefill_smoke.json        # a smoke run

Arms: one `pagedock serve` per threshold (--thresholds, 0 = no cap, vLLM's default), fresh
servers in interleaved repetitions (0 128 256 512 0 128 ...), the engine settings of the online
comparison (bench_systems.pagedock_engine_args) otherwise. Each run, after a warm-up of its own:

    alone       --rounds long prompts (--long-tokens random ids, 1 token out), one at a time:
                the long prompt's time to its token
    neighbour   --rounds times: a long prompt, and once it has run --delay-s a short request
                (--short-tokens in, --short-max-tokens out, streamed): the short request's time
                to first token and to its end, and the long prompt's time to its token

Every prompt is new token ids (no prefix cache hit anywhere); every arm of a repetition sends the
same ones. Reported per arm: medians (and ranges over the repetitions) of each figure.
Writes benchmarks/results/long_prefill_<commit>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks.bench_systems import (  # noqa: E402
    PAGEDOCK_MODEL,
    EqualSettings,
    pagedock_engine_args,
    parse_system,
)
from benchmarks.load_generator import send_one  # noqa: E402
from benchmarks.machine import git_commit  # noqa: E402
from benchmarks.quality_nll import check_commit  # noqa: E402
from benchmarks.repetitions import interleaved_order  # noqa: E402
from benchmarks.result_header import ResultHeader  # noqa: E402
from benchmarks.servers import start_pagedock  # noqa: E402

FIGURES = ("alone_long_s", "neighbour_ttft_ms", "neighbour_e2e_ms", "beside_long_s")


def prompts(vocab: int, count: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    low = min(100, vocab // 4)
    return [[rng.randrange(low, vocab) for _ in range(length)] for _ in range(count)]


async def one_round(
    client: httpx.AsyncClient, long: list[int], short: list[int] | None, args: argparse.Namespace
) -> dict[str, float]:
    """The long prompt, and (`short` given) the short request --delay-s after it started."""
    started = time.perf_counter()
    long_sent = asyncio.create_task(send_one(client, None, long, 1))
    if short is None:
        done = await long_sent
        _check(done.ok, done.error)
        return {"alone_long_s": time.perf_counter() - started}
    await asyncio.sleep(args.delay_s)
    neighbour = await send_one(client, None, short, args.short_max_tokens)
    done = await long_sent
    _check(done.ok and neighbour.ok, done.error or neighbour.error)
    assert neighbour.ttft_s is not None and done.e2e_s is not None
    return {
        "neighbour_ttft_ms": neighbour.ttft_s * 1e3,
        "neighbour_e2e_ms": (neighbour.e2e_s or 0.0) * 1e3,
        "beside_long_s": done.e2e_s,
    }


def _check(ok: bool, error: str | None) -> None:
    if not ok:
        raise RuntimeError(f"a request failed: {error}")


async def measure(url: str, rep: int, args: argparse.Namespace) -> dict[str, list[float]]:
    seed = 1000 * (rep + 1)
    longs = prompts(args.vocab, 2 * args.rounds, args.long_tokens, seed)
    shorts = prompts(args.vocab, args.rounds, args.short_tokens, seed + 1)
    figures: dict[str, list[float]] = {name: [] for name in FIGURES}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        warm = prompts(args.vocab, 2, args.long_tokens, seed=7)
        await asyncio.gather(*(send_one(client, None, p, 4) for p in warm))
        plan: list[tuple[list[int], list[int] | None]] = [
            (longs[i], None) for i in range(args.rounds)
        ]
        plan += [(longs[args.rounds + i], shorts[i]) for i in range(args.rounds)]
        for long, short in plan:
            for name, value in (await one_round(client, long, short, args)).items():
                figures[name].append(value)
    return figures


def run_arm(threshold: int, rep: int, args: argparse.Namespace) -> dict[str, Any]:
    engine_args = {**args.engine_args, "long_prefill_token_threshold": threshold}
    log = args.log_dir / f"t{threshold}_{rep}.log"
    server = start_pagedock(engine_args, args.model, log)
    try:
        figures = asyncio.run(measure(server.url, rep, args))
    finally:
        server.stop()
    medians = {name: round(statistics.median(values), 4) for name, values in figures.items()}
    return {"threshold": threshold, "repetition": rep, **medians, "samples": figures}


def summarize(runs: list[dict[str, Any]], thresholds: list[int]) -> dict[str, Any]:
    """Per threshold and figure: the median of the runs' medians, and their range."""
    out: dict[str, Any] = {}
    for threshold in thresholds:
        mine = [r for r in runs if r["threshold"] == threshold]
        out[str(threshold)] = {
            name: {
                "median": round(statistics.median(r[name] for r in mine), 4),
                "min": round(min(r[name] for r in mine), 4),
                "max": round(max(r[name] for r in mine), 4),
            }
            for name in FIGURES
        }
    return out


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| threshold | long prompt alone s | neighbour TTFT ms | neighbour e2e ms | "
        "long prompt beside it s |",
        "|---|---|---|---|---|",
    ]
    for threshold, figures in summary.items():
        cells = [
            f"{f['median']:,.3g} ({f['min']:,.3g}-{f['max']:,.3g})"
            for f in (figures[name] for name in FIGURES)
        ]
        lines.append(f"| {threshold} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=PAGEDOCK_MODEL)
    parser.add_argument("--thresholds", type=int, nargs="+", default=[0, 128, 256, 512])
    parser.add_argument("--long-tokens", type=int, default=4000)
    parser.add_argument("--short-tokens", type=int, default=32)
    parser.add_argument("--short-max-tokens", type=int, default=16)
    parser.add_argument("--delay-s", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    parser.add_argument("--out", type=Path, help="default: results/long_prefill_<commit>.json")
    parser.add_argument("--note", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    commit = git_commit(ROOT)
    check_commit(commit, args.allow_dirty)
    header = ResultHeader.begin(commit)
    from engine.loader.model_loader import read_model_config
    from pagedock.models.registry import resolve_model

    args.vocab = read_model_config(resolve_model(args.model).path).vocab_size
    args.engine_args = pagedock_engine_args(EqualSettings(), parse_system("pagedock auto"), {})
    args.engine_args["max_model_len"] = args.long_tokens + 64
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-long-prefill-"))
    runs = []
    for rep, threshold in interleaved_order([str(t) for t in args.thresholds], args.repetitions):
        runs.append(run_arm(int(threshold), rep, args))
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "samples"}), flush=True)
    summary = summarize(runs, args.thresholds)
    result = {
        **header.finish(
            "a short request beside a long prompt, by --long-prefill-token-threshold",
            34,
            args.note,
            ("pagedock", "torch", "httpx"),
        ),
        "settings": {k: v for k, v in vars(args).items() if k not in ("log_dir", "out")},
        "summary": summary,
        "runs": runs,
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"long_prefill_{commit or 'unknown'}.json"
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print("\n" + table(summary))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
