"""A teardown that cannot hang: each step of a cluster's teardown gets a deadline; a step still
running at its deadline is named in a warning, with where every task of the loop is waiting,
then cancelled and abandoned (never awaited again), and the teardown goes on. The scenario's own
result stands; the warning says what to look at.

NOTE: not `asyncio.wait_for`: on Python 3.11 it waits, after its timeout, for the cancelled step
to finish, however long that takes, and it loses a cancellation that arrives in the same turn of
the loop as its result (the kubelet's loop once went on forever that way: kubelet.py)."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable
from typing import Any


async def bounded(step: Awaitable[Any], seconds: float, what: str) -> bool:
    """Run `step` for at most `seconds`: True when it finished (its exception, if any, raised),
    False when it was abandoned (with a warning naming `what` and the pending tasks)."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if task in done:
        if not task.cancelled():  # a step cancelled before (the kubelet's loop) has finished
            task.result()
        return True
    warnings.warn(
        f"teardown: {what} still running after {seconds:g} s, abandoned; "
        f"tasks pending:\n{pending_tasks(task)}",
        stacklevel=2,
    )
    task.cancel()
    return False


def pending_tasks(step: asyncio.Future[Any]) -> str:
    """One line per pending task of the running loop but this one, `step` first: where it
    waits, innermost last."""
    others = asyncio.all_tasks() - {step, asyncio.current_task()}
    tasks = ([step] if isinstance(step, asyncio.Task) else []) + sorted(others, key=_name)
    return "\n".join(f"  {_name(t)}: {' > '.join(_awaiting(t)) or repr(t)}" for t in tasks)


def _name(task: asyncio.Task[Any]) -> str:
    return task.get_name()


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The chain of coroutines `task` is suspended in (`Task.get_stack` gives only the first)."""
    chain = []
    coro: Any = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            break
        where = "/".join(frame.f_code.co_filename.split("/")[-2:])  # e2e/kubelet.py
        chain.append(f"{frame.f_code.co_qualname} ({where}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return chain
