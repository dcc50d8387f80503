"""One repetition of an offline run on pagedock, in a process of its own (as
benchmarks/peers/vllm_offline.py is for vLLM):

    python benchmarks/pagedock_offline.py SPEC.json

SPEC holds the model, the engine arguments, the warm-up prompts, the measured prompts and
max_tokens, and with LoRA the adapter of each prompt. Loads the engine, warms it up on the warm-up
prompts (which share no KV block with the measured ones: the caller checks), runs the measured
prompts in one `generate`, and prints one JSON line: load time, elapsed, generated and total
tok/s, the prefix-cache queries and hits and the preemptions of the measured part, and the
settings the engine resolved.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import LLM, LoRARequest, SamplingParams
from engine.core.scheduler_stats import SchedulerStats


def resolved_settings(llm: LLM) -> dict[str, Any]:
    """What the engine settled on, as its own settings (dtype `auto` resolved, block size, ...)."""
    engine = llm.engine
    config = engine.config
    return {
        "dtype_requested": config.dtype,
        "dtype_resolved": str(engine.dtype).removeprefix("torch."),
        "weight_dtype": _weight_dtype(engine),
        "kv_cache_dtype": _kv_cache_dtype(engine),
        "block_size": config.block_size,
        "num_kv_blocks": engine.stats().num_kv_blocks,
        "enable_chunked_prefill": config.enable_chunked_prefill,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "max_num_seqs": config.max_num_seqs,
        "enable_prefix_caching": config.enable_prefix_caching,
        "num_threads": config.num_threads,
        "max_step_ms": getattr(config, "max_step_ms", None),
        "cpu_gemm_dtype": getattr(config, "cpu_gemm_dtype", None),
    }


def _kv_cache_dtype(engine: Any) -> str:
    """The dtype the KV cache holds, `auto` resolved (older engines: the one asked for)."""
    runner = getattr(engine, "runner", None)
    resolved = getattr(runner, "kv_cache_dtype", None)
    asked = getattr(engine.config, "kv_cache_dtype", None)
    return str(resolved or asked or engine.dtype).removeprefix("torch.")


def _weight_dtype(engine: Any) -> str | None:
    """The dtype the CPU GEMMs multiply in (`auto` on a CPU with native bf16: bf16 weights under
    float32 activations), decided as the engine decides it; None where this engine has no such
    choice."""
    try:
        from engine.device import pick_cpu_gemm_dtype  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    config = engine.config
    gemm = pick_cpu_gemm_dtype(config.cpu_gemm_dtype, config.dtype, engine.dtype, engine.device)
    return str(gemm).removeprefix("torch.")


def measured_counters(before: SchedulerStats, after: SchedulerStats) -> dict[str, int]:
    return {
        "prefix_cache_queries": after.prefix_cache_queries - before.prefix_cache_queries,
        "prefix_cache_hits": after.prefix_cache_hits - before.prefix_cache_hits,
        "preemptions": after.num_preemptions - before.num_preemptions,
    }


def lora_requests(spec: dict[str, Any], prompts: str) -> list[LoRARequest] | None:
    """The adapter of each of `spec[prompts]` (benchmarks/lora_throughput.py), or None."""
    lora = spec.get("lora")
    if not lora:
        return None
    ids = {name: i + 1 for i, name in enumerate(lora["adapters"])}
    return [LoRARequest(n, ids[n], lora["adapters"][n]) for n in lora[prompts]]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    llm = LLM(model=spec["model"], **spec["engine_args"])
    load_s = time.perf_counter() - started
    warmup = SamplingParams(max_tokens=spec["warmup_max_tokens"], temperature=0.0, ignore_eos=True)
    warmup_lora = lora_requests(spec, "warmup_prompts")
    llm.generate(spec["warmup_prompts"], warmup, use_tqdm=False, lora_request=warmup_lora)
    params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True)
    lora = lora_requests(spec, "prompts")
    before = llm.stats()
    started = time.perf_counter()
    outs = llm.generate(spec["prompts"], params, use_tqdm=False, lora_request=lora)
    elapsed = time.perf_counter() - started
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    prompt_tokens = sum(len(p) for p in spec["prompts"])
    return {
        "load_s": load_s,
        "elapsed_s": elapsed,
        "requests": len(outs),
        "generated_tokens": generated,
        "generated_tok_s": generated / elapsed,
        "total_tok_s": (generated + prompt_tokens) / elapsed,
        **measured_counters(before, llm.stats()),
        "resolved": resolved_settings(llm),
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(run(spec)), flush=True)


if __name__ == "__main__":
    main()
