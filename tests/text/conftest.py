"""Fixtures for the text-layer tests (the SmolLM2 ones live in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.text.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_gguf_path: Path) -> Tokenizer:
    """pagedock's tokenizer of the real model, built from the GGUF's metadata."""
    return Tokenizer.from_gguf(smollm2_gguf_path)
