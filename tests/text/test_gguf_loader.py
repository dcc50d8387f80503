"""GGUF metadata and weights: parity with transformers on the real model, and clear errors."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.loader.gguf_loader import iter_gguf_weights, read_gguf_config
from pagedock.errors import ModelLoadError
from tests.text.factories import TINY_TOKENS, tiny_llama_weights, write_tiny_gguf


def test_config_matches_transformers_config(smollm2_gguf_path: Path, smollm2_hf_model: Any) -> None:
    ours = read_gguf_config(smollm2_gguf_path)
    theirs = smollm2_hf_model.config
    for field in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "max_position_embeddings",
        "tie_word_embeddings",
        "bos_token_id",
    ):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.rope_theta == theirs.rope_parameters["rope_theta"]
    assert ours.rope_scaling is None and theirs.rope_parameters["rope_type"] == "default"
    assert ours.eos_token_ids == (theirs.eos_token_id,)
    assert ours.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_weights_equal_transformers_dequantized_state_dict(
    smollm2_gguf_path: Path, smollm2_hf_model: Any
) -> None:
    """Every tensor, Q/K included: proof that dequantization and the rope un-permute are right."""
    expected = smollm2_hf_model.state_dict()
    seen = set()
    for name, weight in iter_gguf_weights(smollm2_gguf_path, torch.float32, progress=False):
        assert weight.dtype == torch.float32 and weight.shape == expected[name].shape, name
        max_error = (weight - expected[name]).abs().max().item()
        assert max_error <= 1e-6, f"{name}: max abs error {max_error}"
        seen.add(name)
    # The file ties lm_head to the embedding: no lm_head tensor of its own.
    assert seen == set(expected) - {"lm_head.weight"}


def test_weights_come_out_in_the_requested_dtype(smollm2_gguf_path: Path) -> None:
    weights = iter_gguf_weights(smollm2_gguf_path, torch.bfloat16, progress=False)
    for _, weight in itertools.islice(weights, 3):
        assert weight.dtype == torch.bfloat16


def test_rope_permute_of_q_and_k_is_undone(tmp_path: Path) -> None:
    hf = tiny_llama_weights()
    path = write_tiny_gguf(tmp_path / "tiny.gguf", hf)
    ours = dict(iter_gguf_weights(path, torch.float32, progress=False))
    assert set(ours) == set(hf)
    for name, value in hf.items():
        torch.testing.assert_close(ours[name], torch.from_numpy(value), atol=0, rtol=0, msg=name)
    config = read_gguf_config(path)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (2, 1, 4)
    assert not config.tie_word_embeddings and config.vocab_size == len(TINY_TOKENS)


def test_quantized_tensor_types_are_dequantized(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType, quants

    hf = tiny_llama_weights()
    embed = np.random.default_rng(1).standard_normal((len(TINY_TOKENS), 64)).astype(np.float32)
    del hf["model.embed_tokens.weight"]
    for qtype in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.BF16):
        path = tmp_path / f"{qtype.name}.gguf"
        packed = quants.quantize(embed, qtype)
        write_tiny_gguf(path, hf, raw_tensors={"token_embd.weight": (packed, qtype)})
        weights = dict(iter_gguf_weights(path, torch.float32, progress=False))
        reference = torch.from_numpy(quants.dequantize(packed, qtype))
        torch.testing.assert_close(weights["model.embed_tokens.weight"], reference)


def test_unsupported_architecture_is_a_clear_error(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "gpt2-model.gguf", tiny_llama_weights(), arch="gpt2")
    with pytest.raises(ModelLoadError, match=r"gpt2-model\.gguf: unsupported architecture 'gpt2'"):
        read_gguf_config(path)
    with pytest.raises(ModelLoadError, match="unsupported architecture"):
        next(iter_gguf_weights(path, torch.float32, progress=False))


def test_unsupported_tensor_type_names_the_tensor_and_type(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType

    hf = tiny_llama_weights()
    del hf["model.norm.weight"]
    # An integer tensor where a float weight belongs: not a type the loader can dequantize.
    ints = (np.arange(8, dtype=np.int32), GGMLQuantizationType.I32)
    path = write_tiny_gguf(tmp_path / "ints.gguf", hf, raw_tensors={"output_norm.weight": ints})
    expected = r"ints\.gguf: tensor 'output_norm.weight' has unsupported type I32"
    with pytest.raises(ModelLoadError, match=expected):
        list(iter_gguf_weights(path, torch.float32, progress=False))


@pytest.mark.parametrize("keep_bytes", [3, 2000, -4096], ids=["magic", "metadata", "tensor-data"])
def test_truncated_gguf_is_a_clear_error(
    smollm2_gguf_path: Path, tmp_path: Path, keep_bytes: int
) -> None:
    data = smollm2_gguf_path.read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[:keep_bytes])
    with pytest.raises(ModelLoadError, match=r"truncated\.gguf: .*(truncated|not a GGUF)"):
        read_gguf_config(truncated)


def test_corrupt_header_is_a_clear_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(ModelLoadError, match=r"corrupt\.gguf: truncated or corrupt GGUF file"):
        read_gguf_config(corrupt)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"nothing\.gguf: no such GGUF file"):
        read_gguf_config(tmp_path / "nothing.gguf")
