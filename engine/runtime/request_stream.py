"""RequestStream: one request's outputs, from AsyncEngine's output worker (via the event loop) to
whoever awaits them (engine/runtime/async_engine.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine.runtime.outputs import RequestOutput


class RequestStream:
    """One request's outputs, from the output worker (via the event loop) to whoever awaits them.

    A batch holds every output that arrived since the consumer last looked, in order, so a
    consumer that falls behind catches up in one go instead of one chunk per step.
    """

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.finished = False
        self._pending: list[RequestOutput] = []
        self._error: BaseException | None = None
        self._ready = asyncio.Event()

    def put(self, output: RequestOutput) -> None:
        self._pending.append(output)
        self.finished = self.finished or output.finished
        self._ready.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self.finished = True
        self._ready.set()

    async def batches(self) -> AsyncIterator[list[RequestOutput]]:
        """Every output until the request finishes, in batches; raises if the engine died."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            if batch:
                yield batch
            if self._error is not None:
                raise self._error
            if self.finished and not self._pending:
                return
