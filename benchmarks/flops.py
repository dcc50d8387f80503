"""What a workload costs in arithmetic, and what this machine's float32 GEMM can do."""

from __future__ import annotations

import time

import torch

from benchmarks.workloads import Workload
from engine.model_config import ModelConfig


def layer_flops_per_token(cfg: ModelConfig) -> int:
    """Multiply-adds x 2 of every projection of every layer, for one token."""
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    per_layer = cfg.hidden_size * (q + 2 * kv) + q * cfg.hidden_size
    per_layer += 3 * cfg.hidden_size * cfg.intermediate_size
    return 2 * per_layer * cfg.num_hidden_layers


def attention_flops(cfg: ModelConfig, num_keys: int) -> int:
    """QK^T and PV of one query token over num_keys keys, every layer."""
    q = cfg.num_attention_heads * cfg.head_dim
    return 2 * 2 * q * num_keys * cfg.num_hidden_layers


def workload_flops(cfg: ModelConfig, workload: Workload) -> dict[str, float]:
    """Prefill + decode through the layers, attention over each token's context, and the LM head
    only where a token is sampled (the minimum any engine must compute)."""
    layers = attention = 0
    for prompt in workload.prompts:
        # The prompt, then max_tokens - 1 decode steps (the last sampled token is never fed back).
        num_tokens = len(prompt) + workload.max_tokens - 1
        layers += num_tokens * layer_flops_per_token(cfg)
        attention += sum(attention_flops(cfg, pos + 1) for pos in range(num_tokens))
    lm_head = len(workload.prompts) * workload.max_tokens * 2 * cfg.hidden_size * cfg.vocab_size
    total = layers + attention + lm_head
    return {"layers": layers, "attention": attention, "lm_head": lm_head, "total": total}


def measure_matmul_gflops(size: int = 2048, seconds: float = 3.0) -> float:
    """float32 torch.mm on square matrices: the ceiling a CPU engine's GEMMs can reach here."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    runs, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        torch.mm(a, b)
        runs += 1
    elapsed = time.perf_counter() - started
    return 2 * size**3 * runs / elapsed / 1e9
