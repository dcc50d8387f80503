"""The grammar compiler is warmed up before the server is ready: xgrammar's import and the
vocabulary's TokenizerInfo (seconds, holding the GIL for up to half a second at a time) happen
at start-up, not in the middle of the first guided request's neighbours (issue 34)."""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path

import pytest

from engine.inputs.sampling_params import StructuredOutputsParams
from engine.server.serve import wait_for_grammar_compiler
from engine.structured_outputs.grammar_compiler import GrammarCompiler
from engine.structured_outputs.guided_decoding import GuidedDecoding
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
