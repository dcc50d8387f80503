"""One repetition of an offline run on vLLM's offline API, in vLLM's own venv (never the
project's); the counterpart of benchmarks/pagedock_offline.py:

    $PAGEDOCK_VLLM_PYTHON benchmarks/peers/vllm_offline.py SPEC.json

SPEC holds the model directory, the engine arguments (dtype, max_num_seqs, token budget, prefix
caching), the warm-up prompts, the measured prompts, max_tokens and with LoRA the adapter of each
prompt; the KV bytes and the thread binding come from the environment (VLLM_CPU_KVCACHE_SPACE,
VLLM_CPU_OMP_THREADS_BIND). Prints one JSON line: load time, elapsed, generated and total tok/s,
the prefix-cache queries and hits and the preemptions of the measured part (vLLM's own counters),
and the settings the engine resolved.
"""

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# vLLM's counter names (vllm/v1/metrics/loggers.py in 0.32), as `LLM.get_metrics()` reports them.
COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
    "preemptions": "vllm:num_preemptions",
}


def read_counters(llm: Any) -> dict[str, int]:
    totals = dict.fromkeys(COUNTERS, 0)
    names = {v: k for k, v in COUNTERS.items()}
    for metric in llm.get_metrics():
        if metric.name in names and hasattr(metric, "value"):
            totals[names[metric.name]] += int(metric.value)
    return totals


def resolved_settings(llm: Any) -> dict[str, Any]:
    """vLLM's own settings as its engine resolved them (its CPU platform picks the block size)."""
    config = getattr(llm.llm_engine, "vllm_config", None)
    if config is None:
        return {}
    cache, scheduler, model = config.cache_config, config.scheduler_config, config.model_config
    dtype = str(model.dtype).removeprefix("torch.")
    kv_dtype = str(cache.cache_dtype)
    return {
        "dtype_resolved": dtype,
        # "auto": the KV cache holds the model's dtype.
        "kv_cache_dtype": f"auto ({dtype})" if kv_dtype == "auto" else kv_dtype,
        "block_size": cache.block_size,
        "num_kv_blocks": getattr(cache, "num_gpu_blocks", None),
        "enable_chunked_prefill": scheduler.enable_chunked_prefill,
        "max_num_batched_tokens": scheduler.max_num_batched_tokens,
        "max_num_seqs": scheduler.max_num_seqs,
        "enable_prefix_caching": cache.enable_prefix_caching,
        "kv_cache_space_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
        "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
    }


def lora_requests(spec: dict[str, Any], prompts: str) -> Any:
    """The adapter of each of `spec[prompts]` (benchmarks/lora_throughput.py), or None."""
    from vllm.lora.request import LoRARequest

    lora = spec.get("lora")
    if not lora:
        return None
    ids = {name: i + 1 for i, name in enumerate(lora["adapters"])}
    return [LoRARequest(n, ids[n], lora["adapters"][n]) for n in lora[prompts]]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    llm = LLM(model=spec["model"], disable_log_stats=False, **spec["engine_args"])
    load_s = time.perf_counter() - started
    warmup = [TokensPrompt(prompt_token_ids=p) for p in spec["warmup_prompts"]]
    warmup_params = SamplingParams(
        max_tokens=spec["warmup_max_tokens"], temperature=0.0, ignore_eos=True
    )
    warmup_lora = lora_requests(spec, "warmup_prompts")
    llm.generate(warmup, warmup_params, use_tqdm=False, lora_request=warmup_lora)
    params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True)
    inputs = [TokensPrompt(prompt_token_ids=p) for p in spec["prompts"]]
    lora = lora_requests(spec, "prompts")
    before = read_counters(llm)
    started = time.perf_counter()
    outs = llm.generate(inputs, params, use_tqdm=False, lora_request=lora)
    elapsed = time.perf_counter() - started
    after = read_counters(llm)
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    prompt_tokens = sum(len(p) for p in spec["prompts"])
    return {
        "load_s": load_s,
        "elapsed_s": elapsed,
        "requests": len(outs),
        "generated_tokens": generated,
        "generated_tok_s": generated / elapsed,
        "total_tok_s": (generated + prompt_tokens) / elapsed,
        **{key: after[key] - before[key] for key in COUNTERS},
        "resolved": resolved_settings(llm),
    }


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    print(json.dumps(run(spec)), flush=True)


if __name__ == "__main__":
    main()
