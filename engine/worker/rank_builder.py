"""Builds one rank's model runner: the model (its shard), LoRA adapters, the KV cache, CUDA
graphs.

LLMEngine builds rank 0 with it, each tensor-parallel worker its own rank; the start-up
collectives inside (the KV pool size every rank agrees on, graph capture) happen in the same
order on every rank because every rank runs this same function.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.attention.backend import get_attention_backend
from engine.config import EngineConfig
from engine.core.scheduler_output import ScheduledRequest
from engine.device import pick_cpu_gemm_dtype, pick_kv_cache_dtype
from engine.kernels.cpu_kernels import set_cpu_kernels_enabled
from engine.layers.w8a8_linear import check_quantization
from engine.loader.model_loader import load_model
from engine.model_config import ModelConfig
from engine.models.llama_lora import build_lora
from engine.worker.kv_cache_sizing import pick_num_kv_blocks
from engine.worker.model_runner import ModelRunner

if TYPE_CHECKING:
    from engine.distributed.tp_group import TPGroup


def build_runner(
    config: EngineConfig,
    model_path: Path,
    model_config: ModelConfig,
    max_model_len: int,
    dtype: torch.dtype,
    device: torch.device,
    tp: TPGroup | None = None,
    send_step: Callable[[list[ScheduledRequest]], None] | None = None,
) -> ModelRunner:
    set_cpu_kernels_enabled(config.cpu_kernels)  # before the backend and layers ask for them
    gemm_dtype = pick_cpu_gemm_dtype(config.cpu_gemm_dtype, config.dtype, dtype, device)
    kv_dtype = pick_kv_cache_dtype(config.kv_cache_dtype, dtype, device, gemm_dtype)
    check_quantization(config.quantization, dtype, device)
    backend = get_attention_backend(device, config.attention_backend)
    model = load_model(
        model_path,
        model_config,
        dtype,
        device,
        backend,
        max_model_len,
        onednn=config.onednn,
        gemm_dtype=gemm_dtype,
        weight_cache=config.weight_cache,
        tp=tp,
        quantization=config.quantization,
    )
    lora = build_lora(model, config, dtype, device) if config.enable_lora else None
    num_kv_blocks = pick_num_kv_blocks(
        config, model_config, max_model_len, kv_dtype, device, model.layout.num_kv_heads, tp
    )
    runner = ModelRunner(
        model,
        model_config,
        backend,
        num_kv_blocks,
        config.block_size,
        kv_dtype,
        device,
        seed=config.seed,
        send_step=send_step,
        lora=lora,
    )
    if device.type == "cuda" and not config.enforce_eager:
        from engine.worker.cuda_graph_runner import CudaCapture

        runner.capture_decode_graphs(config.max_num_seqs, max_model_len, CudaCapture())
    return runner
