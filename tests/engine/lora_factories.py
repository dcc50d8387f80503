"""Factories for the LoRA tests: random PEFT adapters of the tiny llama (peft's own LoraConfig and
save_pretrained), hand-written adapter directories for the error cases, and transformers + PEFT
as the reference implementation."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.model_config import ModelConfig

# tests/tiny_model.py's llama: hidden 64, 4 heads of 16 (2 KV heads), intermediate 128, 2 layers.
TINY_CONFIG = ModelConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
# The standard deviation of the random A and B: large enough that each adapter changes greedy
# outputs (lora_B starts at zero in PEFT, which would make an adapter a no-op).
LORA_STD = 0.1


def make_peft_adapter(
    base_dir: Path,
    out_dir: Path,
    *,
    r: int,
    lora_alpha: float,
    target_modules: Iterable[str],
    use_rslora: bool = False,
    seed: int = 0,
) -> Path:
    """A random LoRA adapter of the model in `base_dir`, made and saved by peft itself."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    base = LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(
        r=r,
        lora_alpha=lora_alpha,
        target_modules=list(target_modules),
        lora_dropout=0.0,
        bias="none",
        use_rslora=use_rslora,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * LORA_STD)
    model.save_pretrained(out_dir)
    return out_dir


def peft_reference(base_dir: Path, adapter_dir: Path) -> Any:
    """transformers' llama in float32 with the adapter applied by PEFT."""
    import torch
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    base = LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    return PeftModel.from_pretrained(base, adapter_dir).eval()


def tiny_shapes() -> dict[str, tuple[int, int]]:
    from engine.models.llama_lora import lora_shapes

    return lora_shapes(TINY_CONFIG)


def write_adapter(
    directory: Path,
    *,
    r: int = 4,
    targets: Iterable[str] = ("q_proj", "v_proj"),
    config: dict[str, Any] | None = None,
    extra_tensors: dict[str, Any] | None = None,
    skip: Iterable[str] = (),
) -> Path:
    """An adapter directory as PEFT writes one, by hand: `config` overrides adapter_config.json's
    fields, `extra_tensors` adds tensors, `skip` leaves out tensors by name."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    fields: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": r,
        "lora_alpha": 2 * r,
        "target_modules": list(targets),
        "bias": "none",
        "use_dora": False,
        "use_rslora": False,
        "modules_to_save": None,
    }
    fields.update(config or {})
    (directory / "adapter_config.json").write_text(json.dumps(fields))
    shapes = tiny_shapes()
    tensors = {}
    for layer in range(TINY_CONFIG.num_hidden_layers):
        for proj in targets:
            out_features, in_features = shapes[proj]
            block = "self_attn" if proj in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{block}.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(r, in_features)
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_features, r)
    tensors.update(extra_tensors or {})
    for name in skip:
        del tensors[name]
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    return directory
