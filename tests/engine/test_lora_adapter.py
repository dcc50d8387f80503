"""A LoRA adapter is read in PEFT's format and checked against the base model; whatever pagedock
cannot apply is refused with an error that names the adapter and the cause."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.lora.adapter import LoRAAdapter, load_adapter
from engine.lora.adapter_config import check_adapter_names
from pagedock.errors import ConfigError, ModelLoadError
from tests.engine.lora_factories import TINY_CONFIG, tiny_shapes, write_adapter


def load(path: Path | str, max_rank: int = 64) -> LoRAAdapter:
    return load_adapter(
        "sql",
        str(path),
        max_rank=max_rank,
        shapes=tiny_shapes(),
        num_layers=TINY_CONFIG.num_hidden_layers,
        dtype=torch.float32,
    )


def test_an_adapter_loads_its_pairs_with_the_scaling_folded_into_b(tmp_path: Path) -> None:
    adapter = load(write_adapter(tmp_path / "a", r=4, targets=("q_proj", "down_proj")))
    assert adapter.target_modules == ["down_proj", "q_proj"]
    assert set(adapter.weights) == {
        (0, "q_proj"),
        (1, "q_proj"),
        (0, "down_proj"),
        (1, "down_proj"),
    }
    from safetensors.torch import load_file

    raw = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    b = raw["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"]
    torch.testing.assert_close(adapter.weights[1, "down_proj"].lora_b, b * (8 / 4))


def test_rslora_scales_by_alpha_over_the_square_root_of_the_rank(tmp_path: Path) -> None:
    adapter = load(write_adapter(tmp_path / "a", r=16, config={"use_rslora": True}))
    assert adapter.config.scaling == pytest.approx(32 / math.sqrt(16))


def test_a_rank_above_max_lora_rank_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has rank 16, above max_lora_rank 8; raise"):
        load(write_adapter(tmp_path / "a", r=16), max_rank=8)


def test_a_target_module_the_model_lacks_is_refused(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", config={"target_modules": ["q_proj", "c_attn"]})
    with pytest.raises(ModelLoadError, match=r"targets modules this model lacks .*\['c_attn'\]"):
        load(path)


def test_a_tensor_for_a_module_without_lora_support_is_refused(tmp_path: Path) -> None:
    extra = {"base_model.model.lm_head.lora_A.weight": torch.zeros(4, 64)}
    with pytest.raises(
        ModelLoadError, match=r"'base_model\.model\.lm_head\.lora_A\.weight' is not"
    ):
        load(write_adapter(tmp_path / "a", extra_tensors=extra))


def test_a_shape_that_does_not_fit_the_base_model_is_refused(tmp_path: Path) -> None:
    wrong = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 96)}
    with pytest.raises(
        ModelLoadError, match=r"layers.0.q_proj.lora_A has shape \(4, 96\), .* needs \(4, 64\)"
    ):
        load(write_adapter(tmp_path / "a", extra_tensors=wrong))


def test_a_layer_the_base_model_lacks_is_refused(tmp_path: Path) -> None:
    extra = {
        "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight": torch.zeros(4, 64),
        "base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight": torch.zeros(64, 4),
    }
    with pytest.raises(ModelLoadError, match="is for layer 7, but the base model has 2 layers"):
        load(write_adapter(tmp_path / "a", extra_tensors=extra))


def test_a_lora_a_without_its_lora_b_is_refused(tmp_path: Path) -> None:
    missing = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
    with pytest.raises(ModelLoadError, match=r"lora_A or lora_B missing for \['layers.1.v_proj'\]"):
        load(write_adapter(tmp_path / "a", skip=[missing]))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("use_dora", True, "DoRA is not supported"),
        ("bias", "all", "bias='all' .* is not supported"),
        ("modules_to_save", ["lm_head"], r"modules_to_save\) is not supported"),
        ("rank_pattern", {"q_proj": 8}, r"per-module ranks \(rank_pattern\) is not supported"),
        ("peft_type", "IA3", "peft_type 'IA3' .* is not supported"),
    ],
)
def test_an_unsupported_feature_is_refused_by_name(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load(write_adapter(tmp_path / "a", config={field: value}))


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is not a directory"):
        load(tmp_path / "nowhere")


def test_a_missing_adapter_config_is_refused(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a")
    (path / "adapter_config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"no adapter_config\.json in"):
        load(path)


def test_missing_safetensors_weights_are_refused_naming_a_bin_file(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a")
    (path / "adapter_model.safetensors").rename(path / "adapter_model.bin")
    with pytest.raises(ModelLoadError, match=r"no adapter_model.safetensors .*not adapter_model"):
        load(path)


def test_a_malformed_hf_source_is_refused_naming_the_adapter() -> None:
    # Fetching a well-formed one: tests/engine/test_lora_hf_source.py (the Hub's stand-in).
    with pytest.raises(ModelLoadError, match=r"LoRA adapter 'sql': hf://org/a/b: not a Hugging"):
        load("hf://org/a/b")


def test_an_adapter_named_like_the_base_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'tiny' is the base model's served name"):
        check_adapter_names(["sql", "tiny"], "tiny")
