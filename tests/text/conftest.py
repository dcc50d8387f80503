"""Fixtures for the text-layer tests (the SmolLM2 ones live in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagedock.text.tokenizer import Tokenizer
from tests.tiny_model import make_tiny_llama_dir


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_gguf_path: Path) -> Tokenizer:
    """pagedock's tokenizer of the real model, built from the GGUF's metadata."""
    return Tokenizer.from_gguf(smollm2_gguf_path)


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama repo as the Hub holds it, with files pagedock must not download beside it."""
    repo = make_tiny_llama_dir(tmp_path_factory.mktemp("hub") / "tiny-llama")
    (repo / "README.md").write_text("# tiny llama\n")
    (repo / "pytorch_model.bin").write_bytes(b"pickled weights")
    return repo
