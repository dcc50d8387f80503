"""The grammar compiler's queue is bounded, a compilation nobody waits for is cancelled before it
starts, and a constraint found too costly to evaluate is refused from then on; the mask budget
fails the costly grammar's requests alone (issue 34, items 1 and 2)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.inputs.sampling_params import StructuredOutputsParams
from engine.structured_outputs.grammar_compiler import (
    MAX_PENDING_COMPILES,
    CompileQueueFullError,
    GrammarCompiler,
)
from engine.structured_outputs.structured_output_manager import StructuredOutputManager
from pagedock.errors import InvalidRequestError, InvalidRequestFailure
from pagedock.limits import MAX_SCHEMA_PROPERTIES
from pagedock.text.tokenizer import Tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(smollm2_gguf_path: Path) -> Tokenizer:
    tok = load_tokenizer(smollm2_gguf_path)
    assert tok is not None
    return tok


@pytest.fixture
def blocked(tokenizer: Tokenizer) -> Iterator[tuple[GrammarCompiler, threading.Event]]:
    """A compiler whose compilations wait for the event (the pool's 2 threads then stay busy)."""
    compiler = GrammarCompiler(tokenizer, len(tokenizer.vocabulary()), [])
    release = threading.Event()
    compile_for_real = compiler._compile

    def wait_then_compile(params: StructuredOutputsParams) -> Any:
        release.wait(30)
        return compile_for_real(params)

    compiler._compile = wait_then_compile  # type: ignore[method-assign]
    yield compiler, release
    release.set()
    compiler.shutdown()


def regex(i: int) -> StructuredOutputsParams:
    return StructuredOutputsParams(regex=f"a{{{i + 1}}}")


def test_past_the_pending_cap_a_new_constraint_is_refused_at_once(
    blocked: tuple[GrammarCompiler, threading.Event],
) -> None:
    compiler, release = blocked
    futures = [compiler.submit(regex(i)) for i in range(MAX_PENDING_COMPILES)]
    with pytest.raises(CompileQueueFullError, match="retry shortly"):
        compiler.submit(regex(MAX_PENDING_COMPILES))
    assert compiler.submit(regex(0)) is futures[0]  # a pending one is shared, not refused
    release.set()
    for future in futures:
        future.result(30)
    compiler.submit(regex(MAX_PENDING_COMPILES)).result(30)  # room again


def test_a_compilation_nobody_waits_for_is_cancelled_before_it_starts(
    blocked: tuple[GrammarCompiler, threading.Event],
) -> None:
    compiler, release = blocked
    running = [compiler.submit(regex(i)) for i in range(2)]  # the pool's two threads
    queued = compiler.submit(regex(2))
    shared = compiler.submit(regex(2))
    compiler.give_up(queued)
    assert not queued.cancelled()  # its second caller still waits
    compiler.give_up(shared)
    assert queued.cancelled()
    release.set()
    for future in running:
        future.result(30)
    assert compiler.submit(regex(2)).result(30) is not None  # asked again: compiled anew


def test_a_condemned_constraint_is_refused_with_the_reason(tokenizer: Tokenizer) -> None:
    compiler = GrammarCompiler(tokenizer, len(tokenizer.vocabulary()), [])
    compiled = compiler.compile(regex(0))
    compiler.condemn(compiled, "too costly to evaluate")
    with pytest.raises(InvalidRequestError, match="too costly to evaluate"):
        compiler.compile(regex(0))
    compiler.compile(regex(1))  # others are not affected
    compiler.shutdown()


def test_a_schema_with_too_many_properties_is_refused() -> None:
    properties = {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_PROPERTIES // 2 + 1)}
    nested = {"type": "object", "properties": {"a": {"type": "object", "properties": properties}}}
    schema = {**nested, "properties": {**nested["properties"], **properties}}
    with pytest.raises(InvalidRequestError, match=f"at most {MAX_SCHEMA_PROPERTIES}"):
        StructuredOutputsParams(json=schema)


def test_a_grammar_over_the_mask_budget_fails_its_rows_alone(tokenizer: Tokenizer) -> None:
    compiler = GrammarCompiler(tokenizer, len(tokenizer.vocabulary()), [])
    costly = compiler.compile(StructuredOutputsParams(regex="(.|..|...){1,5000}"))
    cheap = compiler.compile(StructuredOutputsParams(json={"type": "object"}))
    condemned: list[tuple[Any, str]] = []
    manager = StructuredOutputManager(
        compiler.vocab_size, 0.001, lambda c, r: condemned.append((c, r))
    )
    for name, compiled in [("bad0", costly), ("bad1", costly), ("good", cheap)]:
        manager.register(name, compiled, [])
    mask = manager.bitmask(["bad0", "good", "bad1"])
    assert mask is not None and mask[1] == [1]  # only the good row is constrained
    failures = manager.take_failures()
    assert set(failures) == {"bad0", "bad1"}
    reason = failures["bad0"]
    assert isinstance(reason, InvalidRequestFailure) and reason.param == "structured_outputs"
    assert "too costly" in reason and condemned == [(costly, reason)]
    assert manager.take_failures() == {}
    compiler.shutdown()
