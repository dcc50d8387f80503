"""Offline throughput on workload A: pagedock vs HF transformers, same model, dtype and threads.

    python benchmarks/offline_throughput.py [--model smollm2-135m-instruct|tiny|PATH]

Prints generated tokens/s for pagedock (continuous batching), HF `generate` one request at a time
and HF in static batches of 8 with left padding, their ratios, and the scheduler + batch
preparation overhead per step with 256 running requests. HF one-at-a-time is slow, so it runs on
the first --hf-requests requests of the same workload (its rate does not depend on how many).
The comparison with vLLM is benchmarks/offline_vs_vllm.py (fresh processes, interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.flops import measure_matmul_gflops, workload_flops
from benchmarks.scheduler_overhead import measure_scheduler_overhead
from benchmarks.workloads import Workload, workload_a
from engine import LLM, RequestOutput, SamplingParams
from engine.inputs.sampling_params import RequestOutputKind
from engine.loader.model_loader import read_model_config
from pagedock.models.registry import resolve_model


def run_pagedock(
    model: str, workload: Workload, dtype: str, device: str = "cpu", enforce_eager: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    llm = LLM(model=model, dtype=dtype, device=device, enforce_eager=enforce_eager)
    load_s = time.perf_counter() - started
    params = SamplingParams(max_tokens=workload.max_tokens, temperature=0.0, ignore_eos=True)
    llm.generate(workload.prompts[:2], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    started = time.perf_counter()
    outs, kv = generate_sampling_kv(llm, workload.prompts, params)
    elapsed = time.perf_counter() - started - kv.pop("sampling_s")
    generated = sum(len(o.token_ids) for o in outs)
    stats = llm.stats()
    return {
        "system": "pagedock",
        "load_s": load_s,
        "elapsed_s": elapsed,
        "requests": len(outs),
        "generated_tok_s": generated / elapsed,
        "total_tok_s": (generated + workload.num_prompt_tokens) / elapsed,
        **kv,
        "preemptions": stats.num_preemptions,
    }


def generate_sampling_kv(
    llm: LLM, prompts: list[list[int]], params: SamplingParams
) -> tuple[list[RequestOutput], dict[str, float]]:
    """`llm.generate`, stepping the engine here so that the KV cache's occupancy is sampled after
    every step: KV utilisation (tokens held / slots of the blocks allocated to them, summed over
    steps) and what it would be if each running request reserved max_model_len slots. The
    engine keeps no such per-step account itself; `sampling_s` is the time the sampling took."""
    engine = llm.engine
    params = replace(params, output_kind=RequestOutputKind.FINAL_ONLY)
    request_ids = [f"bench-{i}" for i in range(len(prompts))]
    for request_id, prompt in zip(request_ids, prompts, strict=True):
        engine.add_request(request_id, prompt, params)
    finished: dict[str, RequestOutput] = {}
    tokens = slots = running = 0
    sampling_s = 0.0
    while engine.has_unfinished_requests():
        finished.update((o.request_id, o) for o in engine.step())
        started = time.perf_counter()
        occupancy = engine.kv_occupancy()
        tokens += occupancy.num_tokens
        slots += occupancy.num_slots
        running += occupancy.num_running
        sampling_s += time.perf_counter() - started
    kv = {
        "kv_utilisation": tokens / slots if slots else 0.0,
        "naive_kv_utilisation": tokens / (running * engine.max_model_len) if running else 0.0,
        "sampling_s": sampling_s,
    }
    return [finished[r] for r in request_ids], kv


def load_hf(model: str, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM

    resolved = resolve_model(model)
    if resolved.kind == "gguf":
        return AutoModelForCausalLM.from_pretrained(
            resolved.path.parent, gguf_file=resolved.path.name, dtype=dtype
        ).eval()
    return AutoModelForCausalLM.from_pretrained(resolved.path, dtype=dtype).eval()


def run_hf(hf: Any, workload: Workload, batch_size: int, num_requests: int) -> dict[str, Any]:
    """HF generate in static batches (left padding); batch_size 1 = one request at a time."""
    prompts = workload.prompts[:num_requests]
    pad_id = 0
    generated = 0
    started = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i : i + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = hf.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=workload.max_tokens,
                min_new_tokens=workload.max_tokens,
                do_sample=False,
                pad_token_id=pad_id,
            )
        generated += (out.shape[1] - width) * len(batch)
    elapsed = time.perf_counter() - started
    name = "hf-one-at-a-time" if batch_size == 1 else f"hf-static-batch-{batch_size}"
    return {
        "system": name,
        "elapsed_s": elapsed,
        "requests": len(prompts),
        "generated_tok_s": generated / elapsed,
    }


def resolve_benchmark_model(name: str, tmp: Path) -> str:
    if name == "tiny":
        from tests.tiny_model import make_tiny_llama_dir

        # Bigger than the unit tests' model so the GEMMs, not Python, dominate a step.
        return str(
            make_tiny_llama_dir(
                tmp / "tiny",
                hidden_size=256,
                intermediate_size=1024,
                num_hidden_layers=4,
                num_attention_heads=8,
                num_key_value_heads=2,
                vocab_size=4096,
                max_position_embeddings=2048,
            )
        )
    return name


def print_table(
    results: list[dict[str, Any]], flops: float, ceiling_gflops: float, num_requests: int
) -> str:
    """A markdown table: generated tok/s, ratios against every baseline, arithmetic efficiency."""
    rates = {r["system"]: r["generated_tok_s"] for r in results}
    baselines = [b for b in ("hf-one-at-a-time", "hf-static-batch-8") if b in rates]
    head = "| system | gen tok/s | total tok/s | " + " | ".join(f"vs {b}" for b in baselines)
    head += " | GFLOP/s | of ceiling | load s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        ratios = " | ".join(f"{r['generated_tok_s'] / rates[b]:.2f}x" for b in baselines)
        gflops = flops / r["elapsed_s"] / 1e9 if r["requests"] == num_requests else float("nan")
        lines.append(
            f"| {r['system']} | {r['generated_tok_s']:.1f} | "
            f"{r.get('total_tok_s', float('nan')):.1f} | {ratios} | {gflops:.1f} | "
            f"{gflops / ceiling_gflops:.0%} | {r.get('load_s', float('nan')):.1f} |"
        )
    table = "\n".join(lines)
    print("\n" + table)
    return table


def save_chart(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [r["system"] for r in results]
    ax.barh(names, [r["generated_tok_s"] for r in results], color="#4477aa")
    ax.set_xlabel("generated tokens/s (workload A, higher is better)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--hf-requests", type=int, default=16)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--enforce-eager", action="store_true", help="GPU: no CUDA graphs for decode steps"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    return parser.parse_args()


def run_systems(args: argparse.Namespace, model: str, workload: Workload) -> list[dict[str, Any]]:
    """pagedock, then (on the CPU) HF transformers."""
    results = [run_pagedock(model, workload, args.dtype, args.device, args.enforce_eager)]
    if args.device == "cuda":
        results[-1]["system"] += " (eager)" if args.enforce_eager else " (CUDA graphs)"
    print(json.dumps(results[-1]))
    on_cpu = args.device == "cpu"
    if on_cpu and not args.skip_hf:
        started = time.perf_counter()
        hf = load_hf(model, getattr(torch, args.dtype))
        hf_load_s = time.perf_counter() - started
        for batch_size in (1, 8):
            n = args.hf_requests if batch_size == 1 else max(args.hf_requests, 16)
            results.append(run_hf(hf, workload, batch_size, n) | {"load_s": hf_load_s})
            print(json.dumps(results[-1]))
    return results


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    ceiling = measure_matmul_gflops()
    with tempfile.TemporaryDirectory() as tmp:
        model = resolve_benchmark_model(args.model, Path(tmp))
        cfg = read_model_config(resolve_model(model).path)
        workload = workload_a(cfg.vocab_size, args.num_requests)
        flops = workload_flops(cfg, workload)["total"]
        print(
            f"workload A: {len(workload.prompts)} requests, {workload.num_prompt_tokens} prompt "
            f"tokens, {workload.max_tokens} generated each; model {args.model}, {args.dtype}, "
            f"{args.threads} threads; {flops / 1e12:.2f} TFLOP; float32 GEMM ceiling "
            f"{ceiling:.0f} GFLOP/s"
        )
        results = run_systems(args, model, workload)
    table = print_table(results, flops, ceiling, args.num_requests)
    overhead = measure_scheduler_overhead(num_running=256)
    overhead_line = (
        f"scheduler + batch preparation per decode step, 256 running: "
        f"{overhead['per_step_ms']:.2f} ms (schedule {overhead['schedule_ms']:.2f}, inputs "
        f"{overhead['inputs_ms']:.2f}, sampling tensors {overhead['sampling_ms']:.2f}, "
        f"update {overhead['update_ms']:.2f})"
    )
    print("\n" + overhead_line)
    write_results(args, results, ceiling, table, overhead, overhead_line)


def write_results(
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    ceiling: float,
    table: str,
    overhead: dict[str, float],
    overhead_line: str,
) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"offline_{args.model if '/' not in args.model else 'custom'}"
    if args.device != "cpu":
        stem += "_cuda_eager" if args.enforce_eager else "_cuda"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (args.out / f"{stem}.md").write_text(
        f"Workload A offline, {args.model} {args.dtype}, {args.threads} threads, {stamp}, "
        f"{platform.processor() or platform.machine()}; GEMM ceiling {ceiling:.0f} GFLOP/s; HF "
        f"one-at-a-time on the first {args.hf_requests} requests.\n\n{table}\n\n{overhead_line}\n"
    )
    (args.out / f"{stem}.json").write_text(
        json.dumps({"results": results, "overhead": overhead, "ceiling_gflops": ceiling}, indent=2)
    )
    save_chart(results, args.out / f"{stem}.png")


if __name__ == "__main__":
    main()
