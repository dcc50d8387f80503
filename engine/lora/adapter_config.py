"""An adapter's adapter_config.json (PEFT's LoraConfig), read and checked: what pagedock applies,
and a clear error for what it does not (torch-free)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagedock.errors import ConfigError, ModelLoadError

# The llama projections an adapter may target (PEFT's module names).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# adapter_config.json fields whose non-default value asks for something pagedock does not do:
# (field, what it is).
_UNSUPPORTED = (
    ("use_dora", "DoRA"),
    ("modules_to_save", "fully trained extra modules (modules_to_save)"),
    ("rank_pattern", "per-module ranks (rank_pattern)"),
    ("alpha_pattern", "per-module alphas (alpha_pattern)"),
    ("fan_in_fan_out", "transposed (Conv1D) weights (fan_in_fan_out)"),
    ("lora_bias", "a LoRA bias (lora_bias)"),
    ("layer_replication", "layer replication"),
    ("target_parameters", "LoRA on parameters (target_parameters)"),
    ("trainable_token_indices", "trainable token embeddings (trainable_token_indices)"),
    ("alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"),
    ("use_qalora", "QALoRA (use_qalora)"),
    ("arrow_config", "Arrow routing (arrow_config)"),
)


@dataclass(frozen=True)
class AdapterConfig:
    """What the forward pass needs of adapter_config.json."""

    rank: int
    lora_alpha: float
    use_rslora: bool
    target_modules: tuple[str, ...] | None
    """The projections the config names; None when it names them by a pattern (the weights
    then say which)."""

    @property
    def scaling(self) -> float:
        """The factor of the low-rank product: lora_alpha / r, or / sqrt(r) with rsLoRA."""
        return self.lora_alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)


def read_adapter_config(name: str, directory: Path, max_rank: int) -> AdapterConfig:
    """adapter_config.json of the adapter `name` in `directory`: ModelLoadError when it is
    missing, unreadable or asks for what pagedock does not do; ConfigError for a rank above
    `max_rank` (max_lora_rank)."""
    file = directory / "adapter_config.json"
    if not file.is_file():
        raise ModelLoadError(f"LoRA adapter {name!r}: no adapter_config.json in {directory}")
    try:
        raw = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"LoRA adapter {name!r}: cannot read {file} ({e})") from e
    if not isinstance(raw, dict):
        raise ModelLoadError(f"LoRA adapter {name!r}: {file} is not a JSON object")
    _check_supported(name, file, raw)
    rank = _positive_int(name, file, raw, "r")
    if rank > max_rank:
        raise ConfigError(
            f"LoRA adapter {name!r} has rank {rank}, above max_lora_rank {max_rank}; "
            "raise --max-lora-rank to serve it"
        )
    alpha = raw.get("lora_alpha", 8)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise ModelLoadError(f"LoRA adapter {name!r}: lora_alpha in {file} is not a number")
    return AdapterConfig(
        rank=rank,
        lora_alpha=float(alpha),
        use_rslora=bool(raw.get("use_rslora", False)),
        target_modules=_target_modules(name, raw.get("target_modules")),
    )


def check_adapter_names(names: list[str], served_model_name: str) -> None:
    """ConfigError when an adapter would share the base model's name (requests name one or the
    other by it)."""
    if served_model_name in names:
        raise ConfigError(
            f"LoRA adapter name {served_model_name!r} is the base model's served name; "
            "rename the adapter (lora_modules name=path) or set served_model_name"
        )


def _check_supported(name: str, file: Path, raw: dict[str, Any]) -> None:
    peft_type = raw.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise ModelLoadError(
            f"LoRA adapter {name!r}: peft_type {peft_type!r} in {file} is not supported (LORA only)"
        )
    bias = raw.get("bias", "none")
    if bias not in (None, "none"):
        raise ModelLoadError(
            f"LoRA adapter {name!r}: bias={bias!r} in {file} is not supported (trained biases); "
            'only bias="none" adapters can be served'
        )
    for field, what in _UNSUPPORTED:
        value = raw.get(field)
        if value:
            raise ModelLoadError(
                f"LoRA adapter {name!r}: {what} is not supported ({file} has {field}={value!r})"
            )


def _positive_int(name: str, file: Path, raw: dict[str, Any], field: str) -> int:
    value = raw.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelLoadError(
            f"LoRA adapter {name!r}: {field} in {file} must be a positive integer, got {value!r}"
        )
    return value


def _target_modules(name: str, value: Any) -> tuple[str, ...] | None:
    """The projections a list of target_modules names; ModelLoadError for a module a llama has
    no LoRA for. None for a pattern (a string other than "all-linear")."""
    if value == "all-linear":
        return LORA_TARGETS
    if not isinstance(value, list):
        return None
    modules = tuple(str(m).rpartition(".")[2] for m in value)
    lacking = sorted(m for m in set(modules) if m not in LORA_TARGETS)
    if lacking:
        raise ModelLoadError(
            f"LoRA adapter {name!r} targets modules this model lacks (or has no LoRA for): "
            f"{lacking}; a llama's are {list(LORA_TARGETS)}"
        )
    return modules
