"""Speculative decoding's speed (issue 40): `pagedock serve` with `--speculative-config` (n-gram
drafts) against the same server without it, side by side, on a copy-heavy chat workload and on
workload A.

    python benchmarks/speculative_decode.py                 # the real run (clean commit)
    python benchmarks/speculative_decode.py --repetitions 1 --copy-requests 2 4 \\
        --a-requests 8 --allow-dirty --out /tmp/spec_smoke.json      # a smoke run

Each repetition starts two fresh servers, `off` (as `pagedock serve` starts, the engine
settings of the online comparison: bench_systems.pagedock_engine_args, one thread) and `on` (the
same and --speculative-config), each pinned to a core of its own, the cores swapped every
repetition, so that a shared machine's drift falls on both alike; both are warmed up on requests
of their own, then every scenario sends the same requests to both servers at the same time:

- copy_c1, copy_c4: the copy-heavy chat workload (benchmarks/copy_workload.py: "repeat this
  paragraph exactly" and "fix the typos in it", paragraphs of Debian's GPL-3), streamed chat
  completions at concurrency 1 and 4, greedy, up to --copy-max-tokens each, stopping where the
  model stops: equal work on both arms exactly when their outputs are identical, which is checked
  token for token (`return_token_ids`) and recorded;
- workload_a: workload A (random token ids of content seed 100 + repetition, 64 requests by
  default) at --a-concurrency, 128 tokens each (greedy, ignore_eos): equal work by
  construction; its outputs are compared too.

Reported per scenario: each arm's output tokens/s (all output tokens over the time from the first
request sent to the last answer), median and range over the repetitions; on over off as median
over median with the per-pair range, against issue 40's bar (copy_c1 >= 1.8x, copy_c4 >= 1.3x,
workload_a >= 0.97x); identical outputs; the `on` server's acceptance rate (vllm:spec_decode_*
counters scraped before and after each scenario). Writes
benchmarks/results/speculative_decode_<commit>.{json,md}; a tree with uncommitted changes is
refused unless --allow-dirty (the result is then marked +dirty: not one to quote).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import (
    PAGEDOCK_MODEL,
    SMALLEST_BLOCK,
    EqualSettings,
    pagedock_engine_args,
    parse_pagedock_args,
    parse_system,
)
from benchmarks.copy_workload import copy_requests, paragraphs, split_pool
from benchmarks.machine import git_commit
from benchmarks.quality_nll import DEFAULT_TEXT, check_commit
from benchmarks.result_header import ResultHeader
from benchmarks.servers import Server, start_pagedock
from benchmarks.spec_decode_scenario import Scenario, run_scenario, scrape_counters, warm_up
from benchmarks.speculative_report import ARMS, markdown, summarize
from benchmarks.workloads import check_no_shared_block, workload_a

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PACKAGES = ("pagedock", "torch", "httpx", "uvicorn")
# Issue 40's speculative config and its bars (on / off output tokens/s, median over median).
ISSUE_CONFIG = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'  # noqa: E501
BARS = {"copy_c1": 1.8, "copy_c4": 1.3, "workload_a": 0.97}
WARMUP_CONTENT_SEED = 2_000
NUM_WARMUP_PARAGRAPHS = 2


def build_scenarios(args: argparse.Namespace, rep: int) -> list[Scenario]:
    """Repetition `rep`'s scenarios (the copy ones the same every repetition: each runs on
    fresh servers), in run order."""
    c1, c4 = args.copy_requests
    _, pool_c1, pool_c4 = split_pool(args.pool, [NUM_WARMUP_PARAGRAPHS, c1, c4], args.seed)
    scenarios = [
        Scenario.chat("copy_c1", copy_requests(pool_c1, c1, args.seed), 1, args.copy_max_tokens),
        Scenario.chat("copy_c4", copy_requests(pool_c4, c4, args.seed), 4, args.copy_max_tokens),
        Scenario.completions(
            "workload_a",
            workload_a(args.vocab, args.a_requests, content_seed=100 + rep).prompts,
            args.a_concurrency,
        ),
    ]
    return [s for s in scenarios if s.name in args.scenarios]


def warmup_scenario(args: argparse.Namespace) -> Scenario:
    """Requests of their own for each fresh server: two copy requests on paragraphs no scenario
    uses, and workload-A-like prompts sharing no KV block with any repetition's."""
    warm_pool = split_pool(args.pool, [NUM_WARMUP_PARAGRAPHS], args.seed)[0]
    prompts = workload_a(args.vocab, 2, content_seed=WARMUP_CONTENT_SEED).prompts
    for rep in range(args.repetitions):
        measured = workload_a(args.vocab, args.a_requests, content_seed=100 + rep).prompts
        check_no_shared_block(prompts, measured, SMALLEST_BLOCK)
    chat = Scenario.chat("warm-up", copy_requests(warm_pool, 2, args.seed), 2, 16)
    completions = Scenario.completions("warm-up", prompts, 2, 16)
    return Scenario("warm-up", chat.requests + completions.requests, 2)


def start_servers(args: argparse.Namespace, rep: int) -> dict[str, Server]:
    """Both arms' fresh servers, each on a core of its own (swapped every repetition)."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    placement = dict(zip(ARMS, cores if rep % 2 == 0 else cores[::-1], strict=True))
    servers: dict[str, Server] = {}
    try:
        for arm in ARMS:
            engine_args = args.engine_args[arm]
            log = args.log_dir / f"{arm}_{rep}.log"
            servers[arm] = start_pagedock(engine_args, args.model, log, {placement[arm]})
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    args.placement = placement
    return servers


def run_repetition(args: argparse.Namespace, rep: int) -> list[dict[str, Any]]:
    servers = start_servers(args, rep)
    records: list[dict[str, Any]] = []
    try:
        asyncio.run(warm_up(servers, args.warmup))
        for scenario in build_scenarios(args, rep):
            before = scrape_counters(servers["on"].url)
            results = asyncio.run(run_scenario(servers, scenario))
            after = scrape_counters(servers["on"].url)
            records += scenario.records(results, before, after, rep, args.placement)
            for record in records[-len(ARMS) :]:
                print(json.dumps(record), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return records


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=PAGEDOCK_MODEL, help="a built-in name or a directory")
    parser.add_argument("--system", default="pagedock auto", help="pagedock's dtype")
    parser.add_argument("--speculative-config", default=ISSUE_CONFIG, help="the on arm's JSON")
    parser.add_argument("--repetitions", type=int, default=4)
    parser.add_argument("--scenarios", nargs="+", choices=tuple(BARS), default=list(BARS))
    parser.add_argument("--copy-requests", type=int, nargs=2, default=[6, 16], metavar=("C1", "C4"))
    parser.add_argument("--copy-max-tokens", type=int, default=256)
    parser.add_argument("--min-words", type=int, default=60)
    parser.add_argument("--max-words", type=int, default=140)
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT, help="the paragraphs' source")
    parser.add_argument("--a-requests", type=int, default=64)
    parser.add_argument("--a-concurrency", type=int, default=16)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pagedock-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    parser.add_argument("--out", type=Path, help="default: results/speculative_decode_<commit>")
    parser.add_argument("--note", default="")
    return parser.parse_args(argv)


def prepare(args: argparse.Namespace) -> None:
    """The vocabulary, the paragraphs, both arms' engine arguments, the warm-up and a log
    folder, on `args`."""
    from engine.loader.model_loader import read_model_config
    from pagedock.models.registry import resolve_model

    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("side by side needs two usable cores")
    args.vocab = read_model_config(resolve_model(args.model).path).vocab_size
    args.pool = paragraphs(args.text.read_text(), args.min_words, args.max_words)
    settings = EqualSettings(args.kv_cache_gib, threads=1)
    off = pagedock_engine_args(
        settings, parse_system(args.system), parse_pagedock_args(args.pagedock_arg)
    )
    args.engine_args = {"off": off, "on": off | {"speculative_config": args.speculative_config}}
    args.warmup = warmup_scenario(args)
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-spec-"))
    print(f"logs: {args.log_dir}; {len(args.pool)} paragraphs", flush=True)


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    skipped = {"pool", "warmup", "engine_args", "placement"}
    settings = {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in skipped
    }
    return settings | {
        "num_paragraphs": len(args.pool),
        "engine_args": args.engine_args,
        "placement": "both arms at once, a core and a thread each, cores swapped every "
        "repetition; fresh servers every repetition",
        "copy_workload": "chat, greedy, stops where the model stops (no ignore_eos), "
        f"max_tokens {args.copy_max_tokens}; alternately repeat / fix-typos",
        "workload_a": "completions of workload A's prompt lengths (content seed 100 + "
        "repetition), 128 tokens, greedy, ignore_eos",
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    commit = git_commit(HERE.parent)
    check_commit(commit, args.allow_dirty)
    header = ResultHeader.begin(commit)
    prepare(args)
    runs = [record for rep in range(args.repetitions) for record in run_repetition(args, rep)]
    summary = summarize(runs, {name: BARS[name] for name in args.scenarios})
    result = {
        **header.finish(
            "speculative decoding (ngram) on vs off, pagedock serve side by side",
            40,
            args.note,
            PACKAGES,
        ),
        "settings": settings_of(args),
        "summary": summary,
        "runs": runs,
    }
    out = args.out or RESULTS / f"speculative_decode_{commit or 'unknown'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(summary)
    out.with_suffix(".md").write_text(text)
    print("\n" + text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
