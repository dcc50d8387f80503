"""Polling for tests: wait until a condition holds, failing with what was last seen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    check: Callable[[], Any],
    timeout: float = 30.0,
    what: str | Callable[[], str] = "",
    interval: float = 0.05,
) -> Any:
    """Poll `check` (sync or async) until it returns something truthy; `what` names it in the
    failure (a callable: evaluated then, to show the state that was seen)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not within {timeout:.0f}s: {what() if callable(what) else what or check}"
            )
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], Any],
    timeout: float = 30.0,
    what: str | Callable[[], str] = "",
    interval: float = 0.05,
) -> Any:
    """`eventually` for tests without an event loop."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not within {timeout:.0f}s: {what() if callable(what) else what or check}"
            )
        time.sleep(interval)
    return result
