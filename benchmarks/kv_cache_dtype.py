"""What a bf16 or int8 KV cache (EngineConfig.kv_cache_dtype) buys and costs on the CPU.

    python benchmarks/kv_cache_dtype.py                       # the full run (a quiet machine)
    nice -n 19 python benchmarks/kv_cache_dtype.py --layers 4 --reps 3 --requests 4 --max-tokens 16

1. Decode attention, the C++ paged kernel alone: one decode step's attention over every layer
   at workload A's shapes — 64 sequences whose contexts are workload A's prompt lengths plus 64
   generated tokens (mean ~340), SmolLM2-135M's 9 query heads over 3 KV heads of 64 dims, block
   16, 30 layers, each layer its own cache (so no layer's K/V sits in the CPU's caches for the
   next). float32 and bf16 caches hold the same (rounded) values, the int8 cache those values
   quantised (engine/attention/kv_quant.py); steps alternate f32, bf16, int8, f32, ... and the
   median per-step time of each and its ratio to float32's are reported.
2. Greedy agreement of the built-in model with a bf16 and with an int8 cache against a float32
   one: workload A's 64 requests x 128 tokens (float32 GEMMs throughout, so the KV cache is the
   only difference): the share of output tokens identical position by position, outputs
   identical throughout, where outputs first differ, and the chosen tokens' log-probability gap
   before that; with each engine's KV blocks (default 2 GiB: bf16 holds twice the blocks, int8
   3.8x) and its generated tokens per second in that one run (sequential, one sample each, an
   indication only: benchmarks/offline_vs_vllm.py is the interleaved comparison).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.cpu_gemm_dtype_agreement import compare
from benchmarks.machine import git_commit, machine_info
from benchmarks.workloads import workload_a
from engine import LLM, SamplingParams
from engine.attention.kv_quant import quantize_rows
from engine.kernels.cpu_kernels import cpu_kernel_path, load_cpu_kernels

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "kv_cache_dtype.json"
VOCAB = 49152
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 16
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.int8}
GENERATED_SO_FAR = 64  # decode contexts: the prompt plus half of workload A's 128 new tokens


def decode_problem(num_seqs: int, layers: int, dtype: torch.dtype) -> dict[str, Any]:
    """Per layer a K and V cache holding exactly the sequences' blocks, shuffled; one query."""
    gen = torch.Generator().manual_seed(0)
    lens = [len(p) + GENERATED_SO_FAR for p in workload_a(VOCAB, num_seqs).prompts]
    blocks = [-(-n // BLOCK) for n in lens]
    total = sum(blocks)
    perm = torch.randperm(total, generator=gen).to(torch.int32)
    tables = torch.zeros(num_seqs, max(blocks), dtype=torch.int32)
    start = 0
    for row, n in enumerate(blocks):
        tables[row, :n] = perm[start : start + n]
        start += n
    shape = (total, BLOCK, KV_HEADS, HEAD_DIM)
    caches = [
        tuple(
            _stored(torch.randn(shape, generator=gen).to(torch.bfloat16), dtype) for _ in range(2)
        )
        for _ in range(layers)
    ]
    return {
        "query": torch.randn(num_seqs, HEADS, HEAD_DIM, generator=gen),
        "caches": caches,
        "tables": tables,
        "lens": torch.tensor(lens, dtype=torch.int32),
        "mean_context": statistics.mean(lens),
    }


def _stored(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return quantize_rows(values) if dtype == torch.int8 else values.to(dtype)


def time_step(kernels: Any, problem: dict[str, Any], out: torch.Tensor) -> float:
    """Seconds for one decode step's attention over every layer."""
    begin = time.perf_counter()
    for k_cache, v_cache in problem["caches"]:
        kernels.paged_decode(
            problem["query"], k_cache, v_cache, problem["tables"], problem["lens"], 0.125, out
        )
    return time.perf_counter() - begin


def measure_decode_attention(num_seqs: int, layers: int, reps: int) -> dict[str, Any]:
    kernels = load_cpu_kernels()
    if kernels is None:
        sys.exit("the C++ CPU kernels did not build here: nothing to measure")
    problems = {name: decode_problem(num_seqs, layers, dt) for name, dt in DTYPES.items()}
    outs = {name: torch.empty(num_seqs, HEADS, HEAD_DIM) for name in DTYPES}
    times: dict[str, list[float]] = {name: [] for name in DTYPES}
    for name in DTYPES:  # warm-up: page the caches in, spin the threads up
        time_step(kernels, problems[name], outs[name])
    for _ in range(reps):
        for name in DTYPES:
            times[name].append(time_step(kernels, problems[name], outs[name]))
    torch.testing.assert_close(outs["bfloat16"], outs["float32"], rtol=1e-4, atol=1e-5)
    int8_error = (outs["int8"] - outs["float32"]).abs().max().item()
    kv_bytes = {
        name: sum(c.numel() * c.element_size() for pair in p["caches"] for c in pair)
        for name, p in problems.items()
    }
    medians = {name: statistics.median(t) for name, t in times.items()}
    return {
        "num_seqs": num_seqs,
        "mean_context_tokens": problems["float32"]["mean_context"],
        "layers": layers,
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "block_size": BLOCK,
        "reps": reps,
        "threads": torch.get_num_threads(),
        "kernel_path": cpu_kernel_path(),
        "kv_bytes_per_step": kv_bytes,
        "step_ms_median": {n: round(m * 1e3, 3) for n, m in medians.items()},
        "step_ms_min": {n: round(min(t) * 1e3, 3) for n, t in times.items()},
        "step_ms_max": {n: round(max(t) * 1e3, 3) for n, t in times.items()},
        "kv_gb_per_s_median": {n: round(kv_bytes[n] / m / 1e9, 2) for n, m in medians.items()},
        "speedup_over_float32_median": {
            n: round(medians["float32"] / m, 3) for n, m in medians.items() if n != "float32"
        },
        "int8_output_max_abs_error": round(int8_error, 5),
    }


def generate(
    kv_dtype: str, prompts: list[list[int]], max_tokens: int
) -> tuple[list[Any], dict[str, Any]]:
    """Greedy outputs (token ids, chosen log-probabilities) and the run's size and speed."""
    llm = LLM(dtype="float32", cpu_gemm_dtype="float32", kv_cache_dtype=kv_dtype)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=0)
    begin = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - begin
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    run = {
        "num_kv_blocks": llm.engine.num_kv_blocks,
        "seconds": round(seconds, 2),
        "generated_tok_per_s": round(generated / seconds, 1),
    }
    tokens = [
        (o.outputs[0].token_ids, [s.logprob or 0.0 for s in o.outputs[0].logprobs or []])
        for o in outs
    ]
    llm.shutdown()
    return tokens, run


def measure_agreement(num_requests: int, max_tokens: int) -> dict[str, Any]:
    """Greedy agreement of each narrow cache with float32, and each engine's one offline run
    (sequential, one sample each: an indication, not the interleaved comparison)."""
    prompts = workload_a(VOCAB, num_requests).prompts
    reference, float32_run = generate("float32", prompts, max_tokens)
    runs, against_float32 = {"float32": float32_run}, {}
    for name in ("bfloat16", "int8"):
        other, runs[name] = generate(name, prompts, max_tokens)
        against_float32[name] = compare(reference, other)
    return {"max_tokens": max_tokens, "against_float32": against_float32, "offline_runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seqs", type=int, default=64, help="decode attention: sequences")
    parser.add_argument("--layers", type=int, default=30, help="decode attention: layers")
    parser.add_argument("--reps", type=int, default=31, help="decode attention: steps per dtype")
    parser.add_argument("--requests", type=int, default=64, help="agreement: workload A requests")
    parser.add_argument("--max-tokens", type=int, default=128, help="agreement: tokens each")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--note", default="", help="recorded as is (e.g. 'shared, loaded CPUs')")
    args = parser.parse_args()
    attention = measure_decode_attention(args.seqs, args.layers, args.reps)
    print("decode attention", json.dumps(attention), flush=True)
    agreement = measure_agreement(args.requests, args.max_tokens)
    print("greedy agreement", json.dumps(agreement), flush=True)
    args.out.write_text(
        json.dumps(
            {
                "what": "bf16 and int8 vs float32 KV cache on the CPU: decode attention time, "
                "greedy agreement",
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": machine_info(),
                "commit": git_commit(ROOT),
                "command": " ".join(sys.argv),
                "note": args.note,
                "decode_attention": attention,
                "greedy_agreement": agreement,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
