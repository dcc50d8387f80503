"""Tensor parallelism on this machine's CPU: TP=2 (gloo, two processes) against TP=1, interleaved,
with the collectives each step costs.

    python -m benchmarks.tensor_parallel [--repeats 3]
        [--json benchmarks/results/tensor_parallel.json]

The model is a random-weight llama of SmolLM2-135M's width and depth but with 8 query / 2 KV
heads (SmolLM2's 9 heads do not split over 2 ranks): tokens/s depend on shapes, not on weights.
Each run is a fresh process (torch's thread count is per process). Three configurations, in turn:
TP=1 with every core (the engine's default), TP=1 with one thread, and TP=2, whose ranks take
cores / 2 threads each (one here). A warm-up of its own runs first; load time is not counted.

On a 2-core CPU machine TP=2 is expected to be slower than TP=1: the two ranks split the same
cores, and each step adds 2 all-reduces per layer, one for the embedding and a logits gather. The
point is the correctness tests; this records the price and the traffic.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import git_commit, machine_info

ROOT = Path(__file__).resolve().parents[1]
MODEL_SHAPE = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=72,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
NUM_REQUESTS, PROMPT_LEN, MAX_TOKENS = 16, 64, 32

# (name, tensor_parallel_size, num_threads per rank: 0 = the engine's default).
CONFIGS = (("tp1", 1, 0), ("tp1-1thread", 1, 1), ("tp2", 2, 0))
# One run, in its own process: argv = model dir, tensor_parallel_size, num_threads, workload.
_RUN = """
import json, random, sys, time
from engine import LLM, SamplingParams

model, tp, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) or None
n, prompt_len, max_tokens = (int(a) for a in sys.argv[4:7])
llm = LLM(model, tensor_parallel_size=tp, num_threads=threads, dtype="float32", max_model_len=512,
          kv_cache_memory="512MiB")
rng = random.Random(0)
warm = [[rng.randrange(3, 49000) for _ in range(prompt_len)] for _ in range(2)]
prompts = [[rng.randrange(3, 49000) for _ in range(prompt_len)] for _ in range(n)]
params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
llm.generate(warm, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
before = llm.engine.tp_stats()
started = time.perf_counter()
outs = llm.generate(prompts, params, use_tqdm=False)
elapsed = time.perf_counter() - started
after = llm.engine.tp_stats()
generated = sum(len(o.token_ids) for o in outs)
delta = {k: after[k] - before.get(k, 0) for k in after if k != "tensor_parallel_size"}
llm.shutdown()
print(json.dumps({"tp": tp, "num_threads": threads, "elapsed_s": elapsed,
                  "generated_tokens": generated, "generated_tok_s": generated / elapsed,
                  "collectives": delta}))
"""


def make_model(directory: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.tiny_model import make_tiny_llama_dir

    return make_tiny_llama_dir(directory, initializer_range=0.02, **MODEL_SHAPE)


def run_once(model: Path, tp: int, threads: int) -> dict[str, Any]:
    args = [str(model), str(tp), str(threads), str(NUM_REQUESTS), str(PROMPT_LEN), str(MAX_TOKENS)]
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"TP={tp} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["finished_at"] = time.time()
    return result


def per_step(collectives: dict[str, int]) -> dict[str, float]:
    """Collectives and bytes per engine step (steps = those rank 0 sent its workers)."""
    steps = collectives.get("num_steps", 0)
    if not steps:
        return {}
    keys = ("num_all_reduces", "all_reduce_bytes", "num_gathers", "gather_bytes", "step_bytes")
    return {f"{k}_per_step": collectives[k] / steps for k in keys}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_config: dict[str, list[float]] = {}
    for run in runs:
        by_config.setdefault(run["config"], []).append(run["generated_tok_s"])
    medians = {name: statistics.median(v) for name, v in by_config.items()}
    tp2 = next(r for r in runs if r["tp"] == 2)
    return {
        "median_generated_tok_s": medians,
        "tp2_over_tp1": medians["tp2"] / medians["tp1"],
        "tp2_over_tp1_1thread": medians["tp2"] / medians["tp1-1thread"],
        "tp2_steps": tp2["collectives"]["num_steps"],
        "tp2_per_step": per_step(tp2["collectives"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", type=Path, default=ROOT / "benchmarks/results/tensor_parallel.json"
    )
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        model = make_model(Path(tmp) / "llama-576x30-8h2kv")
        for repeat in range(args.repeats):
            for name, tp, threads in CONFIGS:
                run = {"config": name, **run_once(model, tp, threads), "repeat": repeat}
                print(json.dumps(run), flush=True)
                runs.append(run)
    result = {
        "machine": machine_info(),
        "commit": git_commit(ROOT),
        "note": "2 CPU cores shared with other engineers' jobs while this ran: absolute figures "
        "are noisy, the interleaved TP=2/TP=1 ratio is the figure to read",
        "settings": {
            "model": {"random-weight llama": MODEL_SHAPE},
            "dtype": "float32",
            "device": "cpu (gloo)",
            "num_requests": NUM_REQUESTS,
            "prompt_tokens": PROMPT_LEN,
            "max_tokens": MAX_TOKENS,
            "repeats": args.repeats,
            "engine": "LLM() defaults but max_model_len 512 and kv_cache_memory 512MiB (per rank)",
            "configs": [
                {"name": n, "tensor_parallel_size": t, "num_threads": h or "default"}
                for n, t, h in CONFIGS
            ],
        },
        "summary": summarize(runs),
        "runs": runs,
    }
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
