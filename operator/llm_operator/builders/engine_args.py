"""`pagedock serve` command-line flags from the engine settings (flag names mirror the fields)."""

from llm_operator.builders.adapter_source import lora_enabled
from llm_operator.builders.context import BuildContext
from llm_operator.builders.tenancy.pod import engine_tenancy_args
from llm_operator.names import ENGINE_PORT


def engine_args(ctx: BuildContext) -> list[str]:
    engine = ctx.spec.engine
    args = [
        "serve",
        "--model",
        ctx.model_source.model_arg,
        "--host",
        "0.0.0.0",
        "--port",
        str(ENGINE_PORT),
        "--max-num-seqs",
        str(engine.max_num_seqs),
        "--max-num-batched-tokens",
        str(engine.max_num_batched_tokens),
        "--block-size",
        str(engine.block_size),
    ]
    if not engine.enable_prefix_caching:
        args.append("--no-prefix-caching")
    if not engine.enable_chunked_prefill:
        args.append("--no-chunked-prefill")
    args += _optional_args(ctx)
    args += lora_args(ctx)
    args += engine_tenancy_args(ctx)
    args += ["--drain-timeout", str(ctx.drain_timing.drain_timeout_seconds)]
    args += ["--served-model-name", ctx.served_model_name]
    return args + list(engine.extra_args)


def _optional_args(ctx: BuildContext) -> list[str]:
    """Flags passed only when they differ from the engine's own defaults."""
    engine, responses = ctx.spec.engine, ctx.spec.responses
    optional = {
        "--max-model-len": engine.max_model_len,
        "--tensor-parallel-size": engine.tensor_parallel_size
        if engine.tensor_parallel_size > 1
        else None,
        "--dtype": _unless_auto(engine.dtype),
        "--cpu-gemm-dtype": _unless_auto(engine.cpu_gemm_dtype),
        "--quantization": engine.quantization,
        "--kv-cache-dtype": _unless_auto(engine.kv_cache_dtype),
        "--kv-cache-memory": engine.kv_cache_memory,
        "--num-kv-blocks": engine.num_kv_blocks,
        "--max-step-ms": engine.max_step_ms,
        "--long-prefill-token-threshold": engine.long_prefill_token_threshold or None,
        "--speculative-config": engine.speculative_config,
        "--responses-store-ttl-s": responses.ttl_seconds,
        "--responses-store-max-entries": responses.max_entries,
    }
    args: list[str] = []
    for flag, value in optional.items():
        if value is not None:
            args += [flag, str(value)]
    return args


def _unless_auto(choice: str) -> str | None:
    """A dtype choice as a flag value; None for `auto`, the engine's own default."""
    return None if choice == "auto" else choice


def lora_args(ctx: BuildContext) -> list[str]:
    """LoRA on, with vLLM's run-time endpoints (/v1/load_lora_adapter, /v1/unload_lora_adapter)
    through which the operator serves spec.model.adapters: the adapters themselves are never
    flags, so adding or removing one leaves the pod template, and the pods, as they are."""
    if not lora_enabled(ctx):
        return []
    engine = ctx.spec.engine
    args = ["--enable-lora", "--allow-runtime-lora-updating"]
    if engine.max_loras is not None:
        args += ["--max-loras", str(engine.max_loras)]
    if engine.max_lora_rank is not None:
        args += ["--max-lora-rank", str(engine.max_lora_rank)]
    return args
