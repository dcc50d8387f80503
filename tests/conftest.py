"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# Triton kernels run on the CPU through the interpreter unless the suite targets a GPU; the
# variable must be set before triton is first imported.
if os.environ.get("PAGEDOCK_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

# --- the built-in SmolLM2 model (real weights, tokenizer and chat template) -------------------
# Fetched once through the model registry into the user cache (~/.cache/pagedock, or
# $PAGEDOCK_CACHE_DIR), so the suite downloads it on its first run only. The transformers
# objects are independent reference implementations of the same file, loaded once per session.


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF file, from the registry's cache."""
    from pagedock.models.registry import DEFAULT_MODEL, resolve_model

    return resolve_model(DEFAULT_MODEL).path


@pytest.fixture(scope="session")
def smollm2_hf_tokenizer(smollm2_gguf_path: Path) -> Any:
    """transformers' tokenizer built from the same GGUF (the reference for token ids)."""
    from transformers import AutoTokenizer

    path = smollm2_gguf_path
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(scope="session")
def smollm2_hf_model(smollm2_gguf_path: Path) -> Any:
    """transformers' LlamaForCausalLM loaded from the same GGUF, dequantized to fp32, eval mode."""
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF")
    import torch
    from transformers import AutoModelForCausalLM

    path = smollm2_gguf_path
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


# --- end of the SmolLM2 fixtures ---------------------------------------------------------------
