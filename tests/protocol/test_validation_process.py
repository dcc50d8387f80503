"""ValidationProcess: a large body is validated in a child process, leaving this process's GIL
free, with the verdict the calling process would have reached."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from pagedock.http.validation_process import (
    LARGE_BODY_BYTES,
    MAX_CHILD_FAILURES,
    InvalidBody,
    ValidationProcess,
    validate_body,
)
from pagedock.protocol import CompletionRequest

WRONG_SHAPE = json.dumps({"model": "m", "prompt": [1] * 1_000_000 + ["x"]}).encode()


@pytest.fixture
def process() -> Iterator[ValidationProcess]:
    process = ValidationProcess()
    yield process
    process.close()


def test_a_large_body_gets_the_verdict_this_process_would_give(process: ValidationProcess) -> None:
    valid = json.dumps({"model": "m", "prompt": list(range(LARGE_BODY_BYTES))}).encode()
    parsed = asyncio.run(process.validate(CompletionRequest, valid))
    assert parsed == validate_body(CompletionRequest, valid)
    assert isinstance(parsed, CompletionRequest) and len(parsed.prompt) == LARGE_BODY_BYTES
    invalid = asyncio.run(process.validate(CompletionRequest, WRONG_SHAPE))
    assert invalid == validate_body(CompletionRequest, WRONG_SHAPE)
    assert isinstance(invalid, InvalidBody) and invalid.model == "m"
    assert [e["loc"] for e in invalid.errors] == [("prompt", "prompt:token_ids", 1_000_000)]


def test_validating_a_large_body_leaves_this_process_running(process: ValidationProcess) -> None:
    """A thread that ticks every millisecond is held up for the whole of an in-process validation
    (the GIL is held in pydantic's Rust code), and hardly at all while the child validates."""

    def largest_gap(validate: object) -> float:
        gaps: list[float] = []
        done = threading.Event()

        def tick() -> None:
            last = time.perf_counter()
            while not done.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            asyncio.run(validate())  # type: ignore[operator]
        finally:
            done.set()
            ticker.join()
        return max(gaps)

    async def in_child() -> None:
        assert isinstance(await process.validate(CompletionRequest, WRONG_SHAPE), InvalidBody)

    async def here() -> None:
        assert isinstance(validate_body(CompletionRequest, WRONG_SHAPE), InvalidBody)

    asyncio.run(in_child())  # the child started
    gap_here, gap_in_child = largest_gap(here), largest_gap(in_child)
    print(f"\nlargest gap: {gap_here * 1e3:.0f} ms here, {gap_in_child * 1e3:.0f} ms in the child")
    assert gap_in_child < gap_here / 2


def test_a_child_that_dies_is_replaced_and_its_body_validated_here(
    process: ValidationProcess,
) -> None:
    first = asyncio.run(process.validate(CompletionRequest, WRONG_SHAPE))
    child = process._child
    assert child is not None and isinstance(first, InvalidBody)
    os.kill(child.pid, signal.SIGKILL)  # killed for memory, say
    assert asyncio.run(process.validate(CompletionRequest, WRONG_SHAPE)) == first
    assert process.failures == 1 and process._child is None
    assert asyncio.run(process.validate(CompletionRequest, WRONG_SHAPE)) == first
    assert process.failures == 0 and process._child is not None and process._child is not child


def test_a_child_that_cannot_start_leaves_bodies_validated_here(
    process: ValidationProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    for _ in range(MAX_CHILD_FAILURES + 1):
        assert isinstance(
            asyncio.run(process.validate(CompletionRequest, WRONG_SHAPE)), InvalidBody
        )
    assert process.failures == MAX_CHILD_FAILURES
