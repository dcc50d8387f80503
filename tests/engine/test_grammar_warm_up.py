"""The grammar compiler is warmed up before the server is ready: xgrammar's import and the
vocabulary's TokenizerInfo (seconds, holding the GIL for up to half a second at a time) happen
at start-up, not in the middle of the first guided request's neighbours (issue 34)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.inputs.sampling_params import StructuredOutputsParams
from engine.server import serve
from engine.server.serve import wait_for_grammar_compiler
from engine.structured_outputs.grammar_compiler import GrammarCompiler
from engine.structured_outputs.guided_decoding import GuidedDecoding
from pagedock.errors import ConfigError
from pagedock.text.tokenizer import load_tokenizer


def test_warm_up_builds_the_compiler_and_leaves_the_cache_to_requests(
    smollm2_gguf_path: Path,
) -> None:
    tokenizer = load_tokenizer(smollm2_gguf_path)
    assert tokenizer is not None
    compiler = GrammarCompiler(tokenizer, len(tokenizer.vocabulary()), [])
    try:
        assert compiler._compiler is None
        compiler.warm_up().result(timeout=120)
        assert compiler._compiler is not None  # the vocabulary was read once, at start-up
        assert compiler.cache_len() == 0
        schema = StructuredOutputsParams(json={"properties": {"a": {"type": "string"}}})
        assert compiler.compile(schema) is not None
    finally:
        compiler.shutdown()


def test_a_model_without_a_tokenizer_has_nothing_to_warm_up() -> None:
    assert GuidedDecoding(None, 32, [0]).warm_up() is None
    wait_for_grammar_compiler(None)


def test_a_failed_warm_up_is_logged_and_the_server_starts(caplog: pytest.LogCaptureFixture) -> None:
    failed: concurrent.futures.Future[object] = concurrent.futures.Future()
    failed.set_exception(RuntimeError("this tokenizer has no byte-level vocabulary"))
    with caplog.at_level(logging.WARNING, logger="pagedock"):
        wait_for_grammar_compiler(failed)
    assert "did not warm up: this tokenizer has no byte-level vocabulary" in caplog.text


def test_an_engine_that_fails_to_load_returns_once_xgrammars_import_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pagedock serve` run in-process (the CLI tests) leaves no import of xgrammar, and so of
    transformers, running beside its caller's next import of transformers, which transformers'
    lazy module does not survive ("cannot import name 'LlamaConfig'")."""
    events: list[str] = []
    engine_failed = threading.Event()

    def import_module(name: str) -> None:
        engine_failed.wait(timeout=60)
        events.append(f"imported {name}")

    def engine(config: EngineConfig) -> None:
        events.append("engine failed")
        engine_failed.set()
        raise ConfigError("tensor_parallel_size 2 does not fit this model")

    monkeypatch.setattr(serve, "import_module", import_module)
    monkeypatch.setattr(serve, "LLMEngine", engine)
    with pytest.raises(ConfigError):
        serve.load_engine(EngineConfig())
    events.append("returned")
    assert events == ["engine failed", "imported xgrammar", "returned"]
