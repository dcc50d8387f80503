"""RequestStream: one request's outputs, handed from the engine thread to its HTTP handler.

The async engine appends outputs on the event loop (never from the engine thread directly); the
handler awaits them in batches. A batch holds every output that arrived since the handler last
looked, so a handler that falls behind catches up in one go instead of one chunk per step: each
output's text and token lists are cumulative, so the newest output of a completion says it all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from engine.outputs import RequestOutput


@dataclass
class RequestTiming:
    """Monotonic timestamps of one request, as the engine thread saw them."""

    arrival_time: float
    first_token_time: float | None = None
    last_token_time: float | None = None
    num_generated_tokens: int = 0
    finish_reasons: dict[int, str] = field(default_factory=dict)


class RequestStream:
    def __init__(
        self, request_id: str, num_prompt_tokens: int, arrival_time: float, prompt: str | None
    ) -> None:
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens
        self.prompt = prompt  # kept for the debug log line only
        self.timing = RequestTiming(arrival_time)
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
