"""Decode speed and weight memory of `--quantization w8a8` against the default bf16 GEMMs.

    python benchmarks/quantized_decode.py               # the built-in model, at a clean commit
    python benchmarks/quantized_decode.py --model DIR --concurrency 1 --max-tokens 4 \\
        --repetitions 1 --allow-dirty --out /tmp/q.json

Both arms are engines in this one process (the same threads, both built before any run), each at
its defaults but for `quantization`. Per repetition and concurrency C, each arm generates the
same C requests at once (prompts of --prompt-tokens seeded random ids, --max-tokens each,
greedy, ignore_eos): equal work on both sides, in alternating order (A B, then B A, ...) so the
drift of a shared machine falls on both alike. The figures are output tokens per second of wall
time and per second of the process's CPU time (the short prompts' prefill included), median and
range over the repetitions, and the ratio of the medians with the range of the per-repetition
ratios; then, the same way, one prompt of --prefill-tokens alone (prompt tokens per second,
its one output token included). Beside it: how many of the w8a8 arm's greedy tokens match the
bf16 arm's (the whole run's, position by position), and the bytes of each arm's weights.
Writes benchmarks/results/quantized_decode_<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import git_commit
from benchmarks.repetitions import ratio, spread
from benchmarks.result_header import ResultHeader
from pagedock.limits import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ARMS: dict[str, dict[str, Any]] = {"bf16": {}, "w8a8": {"quantization": "w8a8"}}
_PREFILL_SEED = 1_000_000
FIGURES = ("output_tokens_per_s", "output_tokens_per_cpu_s")


def prompts(vocab: int, count: int, length: int, seed: int) -> list[list[int]]:
    """Seeded random token ids, clear of the low special ids."""
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(length)] for _ in range(count)]


def weight_bytes(model: Any) -> int:
    """Bytes of a model's weights as it runs them: its parameters (embedding, norms) plus each
    packed or quantized linear's weight (which are no longer parameters)."""
    from engine.layers.cpu_linear import PackedLinear
    from engine.layers.w8a8_linear import W8A8Linear

    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        if isinstance(module, W8A8Linear):
            total += module.weight_bytes()
        elif isinstance(module, PackedLinear):
            itemsize = module.packed_weight.element_size()
            total += module.in_features * module.out_features * itemsize
    return total


def timed_generate(
    llm: Any, batch: list[list[int]], max_tokens: int
) -> tuple[dict[str, float], list[int]]:
    """Output tokens per second of wall time and per second of this process's CPU time, and
    every output token in order, of one batch at once. NOTE: on a machine shared with other
    work the CPU-time figure is the steadier one: time spent preempted counts in wall time only
    (with one thread no OpenMP thread spins while waiting for a preempted one)."""
    from engine import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    wall, cpu = time.perf_counter(), time.process_time()
    outputs = llm.generate(batch, params, use_tqdm=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = [t for o in outputs for t in o.token_ids]
    figures = {
        "output_tokens_per_s": len(tokens) / wall,
        "output_tokens_per_cpu_s": len(tokens) / cpu,
    }
    return figures, tokens


def run_all(engines: dict[str, Any], args: argparse.Namespace, vocab: int) -> list[dict[str, Any]]:
    """Every (repetition, concurrency, arm) run, arms alternating in order per repetition."""
    runs = []
    names = list(engines)
    for concurrency in args.concurrency:
        batch = prompts(vocab, concurrency, args.prompt_tokens, seed=concurrency)
        for llm in engines.values():  # warm: the first batch of this size pays one-off costs
            timed_generate(llm, batch, 2)
        for rep in range(args.repetitions):
            for name in names if rep % 2 == 0 else names[::-1]:
                figures, tokens = timed_generate(engines[name], batch, args.max_tokens)
                run = {"arm": name, "concurrency": concurrency, "repetition": rep}
                runs.append(run | figures | {"tokens": tokens})
                print(f"{name} c={concurrency} rep {rep}: {figures}", flush=True)
    return runs


def run_prefill(engines: dict[str, Any], args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    """One prompt of --prefill-tokens and one output token per arm and repetition, alternating:
    prompt tokens per second of wall and of CPU time, median and range, w8a8 over bf16. Each
    repetition's prompt is new (the same for both arms): a repeated one would hit the prefix
    cache."""
    names = list(engines)
    for llm in engines.values():
        # NOTE: seeds no other prompt here uses (random.Random(-1) is Random(1), and the decode
        # prompts' seeds are their concurrencies): a shared start would hit the prefix cache.
        timed_generate(llm, prompts(vocab, 1, args.prefill_tokens, seed=_PREFILL_SEED - 1), 1)
    values: dict[str, dict[str, list[float]]] = {f: {n: [] for n in names} for f in FIGURES}
    for rep in range(args.repetitions):
        (prompt,) = prompts(vocab, 1, args.prefill_tokens, seed=_PREFILL_SEED + rep)
        for name in names if rep % 2 == 0 else names[::-1]:
            figures, _ = timed_generate(engines[name], [prompt], 1)
            for figure, value in figures.items():  # per output token: scaled to the prompt's
                values[figure][name].append(value * len(prompt))
            print(f"{name} prefill rep {rep}: {values['output_tokens_per_cpu_s'][name][-1]:.0f}")
    return {
        figure.replace("output", "prompt"): {
            **{arm: vars(spread(v)) for arm, v in by_arm.items()},
            "w8a8_over_bf16": vars(ratio(by_arm["w8a8"], by_arm["bf16"])),
        }
        for figure, by_arm in values.items()
    }


def summarize(runs: list[dict[str, Any]], concurrencies: list[int]) -> dict[str, Any]:
    """Per concurrency: each arm's median and range, w8a8 over bf16, and greedy agreement."""
    summary: dict[str, Any] = {}
    for concurrency in concurrencies:
        by_arm = {
            arm: sorted(
                (r for r in runs if r["arm"] == arm and r["concurrency"] == concurrency),
                key=lambda r: r["repetition"],
            )
            for arm in ARMS
        }
        quantized, reference = by_arm["w8a8"][0]["tokens"], by_arm["bf16"][0]["tokens"]
        same = sum(a == b for a, b in zip(quantized, reference, strict=True))
        entry: dict[str, Any] = {"greedy_tokens_matching_bf16": round(same / len(reference), 4)}
        for figure in FIGURES:
            values = {arm: [r[figure] for r in rs] for arm, rs in by_arm.items()}
            entry[figure] = {
                **{arm: vars(spread(v)) for arm, v in values.items()},
                "w8a8_over_bf16": vars(ratio(values["w8a8"], values["bf16"])),
            }
        summary[str(concurrency)] = entry
    return summary


def build_engines(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(engines by arm, what each resolved to, the vocabulary size)."""
    from engine import LLM

    engines, resolved = {}, {}
    for name, settings in ARMS.items():
        max_model_len = max(args.prompt_tokens + args.max_tokens, args.prefill_tokens + 1)
        llm = LLM(
            model=args.model, max_model_len=max_model_len, num_threads=args.num_threads, **settings
        )
        engines[name] = llm
        resolved[name] = {
            "settings": settings,
            "weight_bytes": weight_bytes(llm.engine.model),
            "kv_cache_dtype": str(llm.engine.runner.kv_cache_dtype).removeprefix("torch."),
        }
    vocab = engines["bf16"].engine.model_config.vocab_size
    return engines, resolved, vocab


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--prefill-tokens", type=int, default=1024, help="0: no prefill figure")
    parser.add_argument("--num-threads", type=int, default=None, help="default: every core")
    parser.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    parser.add_argument("--out", type=Path, default=None, help="default: results/, by commit")
    parser.add_argument("--note", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    commit = git_commit(ROOT)
    if not args.allow_dirty and (commit is None or commit.endswith("+dirty")):
        sys.exit(f"the checkout is at {commit}: commit first, or pass --allow-dirty (a check)")
    header = ResultHeader.begin(commit)
    engines, resolved, vocab = build_engines(args)
    runs = run_all(engines, args, vocab)
    result = {
        **header.finish(
            "decode tokens/s, --quantization w8a8 vs bf16 GEMMs", 40, args.note, ("torch",)
        ),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "arms": resolved,
        "summary": summarize(runs, args.concurrency),
        "prefill": run_prefill(engines, args, vocab) if args.prefill_tokens else None,
        "runs": [{k: v for k, v in r.items() if k != "tokens"} for r in runs],
    }
    out = args.out or RESULTS / f"quantized_decode_{commit or 'unknown'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
