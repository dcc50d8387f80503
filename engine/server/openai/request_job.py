"""RequestJob: the life every HTTP request on the engine has, whatever its engine requests make
(a generation's choices: engine/server/openai/generation.py; an embedding job's vectors:
engine/server/embeddings/embedding_job.py).

    begin     its duration starts, its ids are remembered for the log line and spans, and the
              client's disconnect is watched from then on (a client that leaves while its
              prompts are queued stops them all)
    queue     every engine request queued at once (one engine-loop round); the first failure is
              raised once all are back, with the queued ones kept for `close` to abort
    close     which every way the request ends goes through (idempotent): its duration ends, its
              tenant's quota is given back with the tokens it generated, the watcher stops and
              whatever has not finished is aborted
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from fastapi import Request

from engine.inputs.engine_request import AdapterRef, EngineRequest
from engine.runtime.async_engine import RequestStream
from engine.server.openai.context import ServerContext
from engine.server.tenancy.tenant_admission import TenantAdmission
from pagedock.request_ids import remember

logger = logging.getLogger("pagedock.server")


class RequestJob:
    def __init__(self, ctx: ServerContext, lora_request: AdapterRef | None) -> None:
        self.ctx = ctx
        self.lora_request = lora_request
        # What the response's `model` says: the adapter's name, as vLLM's, or the base model's.
        self.model = ctx.served_model_name if lora_request is None else lora_request.name
        self.id = uuid.uuid4().hex
        self.streams: list[RequestStream] = []
        self.admission: TenantAdmission | None = None
        """Its hold on its tenant's quota, from admission until `close`."""
        self.closed = False
        self._watcher: asyncio.Task[None] | None = None

    def begin(self, raw_request: Request, arrival_time: float) -> None:
        self.ctx.metrics.request_durations.begin(self.id, arrival_time)  # close() ends it
        remember(self.id)  # its ids, for the end-of-request log line and spans
        self._watcher = asyncio.create_task(self._watch_disconnect(raw_request))

    @property
    def num_generated_tokens(self) -> int:
        """The tokens counted against the tenant at `close` (none for an embedding)."""
        return 0

    def rate_limit_headers(self) -> dict[str, str]:
        """The tenant's x-ratelimit-* headers, for the answer (none when it has no limits)."""
        return {} if self.admission is None else self.admission.headers()

    async def queue_all(self, requests: list[EngineRequest]) -> None:
        queued = await asyncio.gather(
            *(self.ctx.engine.queue_request(r) for r in requests), return_exceptions=True
        )
        self.streams = [s for s in queued if isinstance(s, RequestStream)]
        failed = next((e for e in queued if isinstance(e, BaseException)), None)
        if failed is not None:
            raise failed

    def close(self) -> None:
        self.closed = True
        self.ctx.metrics.request_durations.end(self.id)
        if self.admission is not None:
            self.admission.finish(self.num_generated_tokens)
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
        for stream in self.streams:
            if not stream.finished:
                self.ctx.engine.abort(stream.request_id)

    async def _watch_disconnect(self, request: Request) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                logger.debug("client of %s disconnected; aborting", self.id)
                self.close()
                return
