"""The architecture of a llama-family model, read from an HF config.json or GGUF metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagedock.errors import ModelLoadError

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "yarn")


@dataclass(frozen=True)
class ModelConfig:
    """Everything the model code needs to know; mirrors HF's LlamaConfig field names."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # HF's rope_scaling / rope_parameters dict minus rope_theta; None or rope_type "default" =
    # plain RoPE.
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    # A short, stable identity (architecture + name) used to salt block hashes.
    name: str = "llama"

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelLoadError(
                f"num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        rope_type = self.rope_type
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ModelLoadError(
                f"unsupported rope scaling type {rope_type!r}; supported: {SUPPORTED_ROPE_TYPES}"
            )

    @property
    def rope_type(self) -> str:
        if not self.rope_scaling:
            return "default"
        return str(self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default")))

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any], name: str = "llama") -> ModelConfig:
        """Build from an HF config.json dict (transformers 4.x `rope_scaling` or 5.x
        `rope_parameters`)."""
        archs = cfg.get("architectures") or ["LlamaForCausalLM"]
        if not any(a in SUPPORTED_ARCHITECTURES for a in archs) and cfg.get("model_type") not in (
            "llama",
            "mistral",
        ):
            raise ModelLoadError(
                f"unsupported architecture {archs} (model_type={cfg.get('model_type')!r}); "
                f"pagedock serves {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise ModelLoadError(
                f"unsupported hidden_act {cfg.get('hidden_act')!r}; expected 'silu'"
            )
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope_theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        heads = int(cfg["num_attention_heads"])
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope
            if rope.get("rope_type", rope.get("type", "default")) != "default"
            else None,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", False)),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
            name=name,
        )

    @classmethod
    def from_hf_dir(cls, path: Path) -> ModelConfig:
        config_file = path / "config.json"
        try:
            cfg = json.loads(config_file.read_text())
        except FileNotFoundError as e:
            raise ModelLoadError(f"{config_file}: no config.json in the model directory") from e
        except json.JSONDecodeError as e:
            raise ModelLoadError(f"{config_file}: not valid JSON ({e})") from e
        try:
            return cls.from_hf_dict(cfg, name=path.name)
        except KeyError as e:
            raise ModelLoadError(f"{config_file}: missing required field {e}") from e
