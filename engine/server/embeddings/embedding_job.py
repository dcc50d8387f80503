"""EmbeddingJob: the engine requests behind one /v1/embeddings request, one per input.

Its life is every request's (engine/server/openai/request_job.py), without tokens: every input is
checked (all or none), the tenant's quota admits the request by its prompt tokens, every input is
queued at once, and `close` aborts what has not finished. A client that leaves aborts every input.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

import torch
from fastapi import Request

from engine.inputs.engine_request import AdapterRef, EngineRequest
from engine.inputs.pooling_params import PoolingParams
from engine.runtime.async_engine import QueueFullError, RequestStream
from engine.runtime.outputs import RequestOutput
from engine.server.openai.context import ServerContext
from engine.server.openai.errors import GenerationError
from engine.server.openai.handoff import cut_by_drain
from engine.server.openai.prompt_work import in_prompt_pool
from engine.server.openai.request_job import RequestJob
from engine.server.tenancy.tenant_admission import admit_tenant
from engine.server.tenancy.tenant_resolver import tenant_of
from pagedock.errors import InvalidRequestError, InvalidRequestFailure
from pagedock.tenancy.tenants import Tenant
from pagedock.text.prompt_renderer import Prompt

logger = logging.getLogger("pagedock.server")


class EmbeddingJob(RequestJob):
    def __init__(self, ctx: ServerContext, lora_request: AdapterRef | None) -> None:
        super().__init__(ctx, lora_request)
        self.requests: list[EngineRequest] = []

    @classmethod
    async def start(
        cls,
        ctx: ServerContext,
        raw_request: Request,
        prompts: list[Prompt],
        params: PoolingParams,
        priority: int,
        arrival_time: float,
        lora_request: AdapterRef | None = None,
        cache_salt: str | None = None,
    ) -> EmbeddingJob:
        """Check every input (InvalidRequestError, PromptTooLongError: the first, for all), admit
        the request against its tenant's quota (a 429 otherwise), then queue every input at once
        (QueueFullError); on any failure, abort those already queued and re-raise."""
        job = cls(ctx, lora_request)
        job.begin(raw_request, arrival_time)
        tenant = tenant_of(raw_request)
        process = functools.partial(
            ctx.engine.input_processor.process_pooling,
            params=params,
            priority=priority,
            arrival_time=arrival_time,
            lora_request=lora_request,
            cache_salt=cache_salt,
            tenant=tenant.name,
        )
        try:
            job.requests = await in_prompt_pool(ctx, _engine_requests, process, job.id, prompts)
            await job._admit_and_queue(tenant, priority)
        except BaseException:
            job.close()
            raise
        if job.closed:  # the client left while its inputs were queued
            job.close()
        return job

    @property
    def num_prompt_tokens(self) -> int:
        """Every input's tokens, as the engine runs them (after truncation)."""
        return sum(len(r.prompt_token_ids) for r in self.requests)

    async def _admit_and_queue(self, tenant: Tenant, priority: int) -> None:
        metrics = self.ctx.metrics.tenants
        engine = self.ctx.engine
        try:
            engine.check_admission(len(self.requests))
        except QueueFullError:
            metrics.observe_rejected(tenant.name, "queue_full")
            raise
        self.admission = await admit_tenant(
            self.ctx.quotas, metrics, tenant, priority, self.num_prompt_tokens
        )
        await self.queue_all(self.requests)

    async def collect(self) -> list[torch.Tensor]:
        """Every input's embedding, in input order; the engine's error as the client's (400)
        or the server's (500), cut_by_drain()'s 503 when the drain deadline aborted one."""
        finals = await asyncio.gather(*(_final(s) for s in self.streams))
        embeddings = []
        for output in finals:
            if output.error is not None or output.finish_reason == "error":
                raise _failure(output.error)
            if output.pooling_output is None:  # aborted: by the drain deadline, or the client
                if self.ctx.handing_off:
                    raise cut_by_drain()
                raise GenerationError("the request was aborted before its embedding was made")
            embeddings.append(output.pooling_output)
        return embeddings


def _engine_requests(
    process: Callable[..., EngineRequest], job_id: str, prompts: list[Prompt]
) -> list[EngineRequest]:
    """Each input's engine request, checked by the engine's input processor (`process`: its
    process_pooling with the request's params), on the prompt pool: an input's ids are checked
    one by one. A token-id input's errors name `input`."""
    try:
        return [
            process(f"{job_id}-{i}", p.token_ids, prompt_text=p.text) for i, p in enumerate(prompts)
        ]
    except InvalidRequestError as e:
        if e.param == "prompt":
            e.param = "input"
        raise


async def _final(stream: RequestStream) -> RequestOutput:
    """A request's last output (an embedding request has one, when it finishes)."""
    last: RequestOutput | None = None
    async for batch in stream.batches():
        last = batch[-1]
    assert last is not None, "a stream ends with its request's final output"
    return last


def _failure(error: str | None) -> Exception:
    """What a request that failed in the engine raises: the client's error (400) when its own
    content caused it, else the engine's (500)."""
    if isinstance(error, InvalidRequestFailure):
        return InvalidRequestError(error, error.param)
    return GenerationError(error or "the request failed in the engine")
