"""Rope scaling variants against transformers' implementation of each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM
from tests.engine.conftest import make_prompts, prefill_logits
from tests.tiny_model import make_tiny_llama_dir

SCALINGS: dict[str, dict[str, Any]] = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 256,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
}


@pytest.mark.parametrize("kind", sorted(SCALINGS))
def test_prefill_logits_match_transformers_with_rope_scaling(kind: str, tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    rope = {"rope_theta": 10000.0, **SCALINGS[kind]}
    model_dir = make_tiny_llama_dir(tmp_path, rope_parameters=rope)
    hf = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    llm = LLM(model=str(model_dir), dtype="float32", num_kv_blocks=64, max_model_len=1024)
    prompt = make_prompts(1, 300, 300, seed=3)[0]  # beyond the original 256 positions
    with torch.inference_mode():
        theirs = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(prefill_logits(llm, prompt), theirs, atol=1e-4, rtol=1e-4)
