"""LoRA in pagedock's llama: where HF's seven projections live here (q/k/v fused into qkv_proj,
gate/up into gate_up_proj: each part's delta goes to its own slice of the fused product), and the
engine's LoRA built from EngineConfig: the adapters loaded and checked against this model, its
four projection modules per layer wrapped (engine/lora/lora_linear.py).
"""

from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.lora.adapter import load_adapter
from engine.lora.lora_linear import LoRALinear
from engine.lora.lora_manager import LoRAManager, Placement
from engine.model_config import ModelConfig
from engine.models.llama import LlamaForCausalLM

# HF's projection -> (the module of a decoder layer that computes it, its shard of that module's
# fused product, or None for an unfused module).
_PARTS = {
    "q_proj": ("self_attn.qkv_proj", "q"),
    "k_proj": ("self_attn.qkv_proj", "k"),
    "v_proj": ("self_attn.qkv_proj", "v"),
    "o_proj": ("self_attn.o_proj", None),
    "gate_proj": ("mlp.gate_up_proj", "gate"),
    "up_proj": ("mlp.gate_up_proj", "up"),
    "down_proj": ("mlp.down_proj", None),
}


def lora_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) of each projection an adapter may target."""
    hidden, inter = config.hidden_size, config.intermediate_size
    q = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    return {
        "q_proj": (q, hidden),
        "k_proj": (kv, hidden),
        "v_proj": (kv, hidden),
        "o_proj": (hidden, q),
        "gate_proj": (inter, hidden),
        "up_proj": (inter, hidden),
        "down_proj": (hidden, inter),
    }


def lora_placement(model: LlamaForCausalLM) -> Placement:
    """Each projection's module and output columns in `model` (the whole model: LoRA refuses
    tensor parallelism)."""
    shapes = lora_shapes(model.config)
    placement: dict[str, tuple[str, int, int]] = {}
    for proj, (module, shard) in _PARTS.items():
        columns = model.shard_rows(shard) or (0, shapes[proj][0])
        placement[proj] = (module, columns[0], columns[1])
    return placement


def add_lora_layers(model: LlamaForCausalLM, manager: LoRAManager) -> None:
    """Wrap every decoder layer's qkv_proj, o_proj, gate_up_proj and down_proj."""
    modules = sorted({module for module, _ in _PARTS.values()})
    for index, layer in enumerate(model.layers):
        for module in modules:
            parent_name, attr = module.split(".")
            parent = getattr(layer, parent_name)
            setattr(parent, attr, LoRALinear(getattr(parent, attr), (index, module), manager))


def build_lora(
    model: LlamaForCausalLM, config: EngineConfig, dtype: torch.dtype, device: torch.device
) -> LoRAManager:
    """Load and check every adapter of `config.lora_modules` (ModelLoadError, ConfigError),
    then wrap `model`'s projections."""
    shapes = lora_shapes(model.config)
    adapters = {
        name: load_adapter(
            name,
            path,
            max_rank=config.max_lora_rank,
            shapes=shapes,
            num_layers=model.config.num_hidden_layers,
            dtype=dtype,
        )
        for name, path in config.lora_paths().items()
    }
    manager = LoRAManager(adapters, lora_placement(model), config.max_loras, device)
    add_lora_layers(model, manager)
    return manager
