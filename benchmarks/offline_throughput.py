"""Offline throughput on workload A: pagedock vs HF transformers, same model, dtype and threads.

    python benchmarks/offline_throughput.py [--model smollm2-135m-instruct|tiny|PATH]

Prints generated tokens/s for pagedock (continuous batching), HF `generate` one request at a time
and HF in static batches of 8 with left padding, their ratios, and the scheduler + batch
preparation overhead per step with 256 running requests. HF one-at-a-time is slow, so it runs on
the first --hf-requests requests of the same workload (its rate does not depend on how many).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.scheduler_overhead import measure_scheduler_overhead
from benchmarks.workloads import Workload, workload_a
from engine import LLM, SamplingParams
from engine.model_registry import resolve_model


def run_pagedock(model: str, workload: Workload, dtype: str) -> dict[str, Any]:
    started = time.perf_counter()
    llm = LLM(model=model, dtype=dtype)
    load_s = time.perf_counter() - started
    params = SamplingParams(max_tokens=workload.max_tokens, temperature=0.0, ignore_eos=True)
    llm.generate(workload.prompts[:2], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    started = time.perf_counter()
    outs = llm.generate(workload.prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    generated = sum(len(o.token_ids) for o in outs)
    stats = llm.stats()
    return {
        "system": "pagedock",
        "load_s": load_s,
        "elapsed_s": elapsed,
        "requests": len(outs),
        "generated_tok_s": generated / elapsed,
        "total_tok_s": (generated + workload.num_prompt_tokens) / elapsed,
        "kv_utilisation": stats.kv_utilisation,
        "naive_kv_utilisation": stats.naive_kv_utilisation,
        "preemptions": stats.num_preemptions,
    }


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
        from engine.tiny_model import make_tiny_llama_dir

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


def print_table(results: list[dict[str, Any]], base: str = "hf-one-at-a-time") -> None:
    rates = {r["system"]: r["generated_tok_s"] for r in results}
    print(f"\n{'system':<22}{'gen tok/s':>12}{'vs HF 1-at-a-time':>20}{'vs HF batch 8':>16}")
    for r in results:
        rel1 = r["generated_tok_s"] / rates[base] if base in rates else float("nan")
        rel8 = (
            r["generated_tok_s"] / rates["hf-static-batch-8"]
            if "hf-static-batch-8" in rates
            else float("nan")
        )
        print(f"{r['system']:<22}{r['generated_tok_s']:>12.1f}{rel1:>19.2f}x{rel8:>15.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--hf-requests", type=int, default=16)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = resolve_benchmark_model(args.model, Path(tmp))
        from engine.model_loader import read_model_config

        vocab = read_model_config(resolve_model(model).path).vocab_size
        workload = workload_a(vocab, args.num_requests)
        print(
            f"workload A: {len(workload.prompts)} requests, {workload.num_prompt_tokens} prompt "
            f"tokens, {workload.max_tokens} generated each; model {args.model}, {args.dtype}, "
            f"{args.threads} threads"
        )
        results = [run_pagedock(model, workload, args.dtype)]
        print(json.dumps(results[-1]))
        if not args.skip_hf:
            started = time.perf_counter()
            hf = load_hf(model, getattr(torch, args.dtype))
            print(f"HF transformers loaded the model in {time.perf_counter() - started:.1f}s")
            for batch_size in (1, 8):
                n = args.hf_requests if batch_size == 1 else max(args.hf_requests, 16)
                results.append(run_hf(hf, workload, batch_size, n))
                print(json.dumps(results[-1]))
    print_table(results)
    overhead = measure_scheduler_overhead(num_running=256)
    print(
        f"\nscheduler + batch preparation per decode step, 256 running: "
        f"{overhead['per_step_ms']:.2f} ms (schedule {overhead['schedule_ms']:.2f}, inputs "
        f"{overhead['inputs_ms']:.2f}, sampling tensors {overhead['sampling_ms']:.2f}, "
        f"update {overhead['update_ms']:.2f})"
    )
    if args.json:
        args.json.write_text(json.dumps({"results": results, "overhead": overhead}, indent=2))


if __name__ == "__main__":
    main()
