"""POST /v1/embeddings: each input's embedding, as floats or base64 (pagedock/protocol/).

The inputs are tokenized on the prompt pool (a text with the tokenizer's special tokens unless
`add_special_tokens` is false), then run as an EmbeddingJob: one engine request per input,
batched by the scheduler with every other request. The answer is built off the event loop when
it is large.
"""

from __future__ import annotations

import asyncio
import base64
import time

import torch
from fastapi import Request, Response

from engine.inputs.pooling_params import PoolingParams
from engine.server.embeddings.embedding_job import EmbeddingJob
from engine.server.openai.context import ServerContext
from engine.server.openai.guards import resolve_model
from engine.server.openai.prompt_work import check_prompt_chars, in_prompt_pool, prompt_chars
from engine.server.tenancy.tenant_resolver import tenant_of
from pagedock.errors import InvalidRequestError
from pagedock.protocol.embeddings import (
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    EmbeddingUsage,
)
from pagedock.protocol.prompt_input import PromptInput
from pagedock.tenancy.tenants import Tenant
from pagedock.text.prompt_renderer import Prompt, encode_text
from pagedock.text.tokenizer import Tokenizer

# Answers with more values than this are serialised on a worker thread, not the event loop.
OFF_LOOP_MIN_VALUES = 65_536


async def create_embedding(
    ctx: ServerContext, body: EmbeddingRequest, raw_request: Request
) -> Response:
    arrival_time = time.monotonic()
    adapter = resolve_model(ctx, body.model)
    params = PoolingParams(
        pooling_type=body.pooling_type,
        normalize=body.normalize,
        dimensions=body.dimensions,
        truncate_prompt_tokens=body.truncate_prompt_tokens,
    )
    check_prompt_chars(ctx, prompt_chars(body.input), "input")
    prompts = await in_prompt_pool(
        ctx, embedding_prompts, ctx.tokenizer, body.input, body.add_special_tokens
    )
    priority = _priority(ctx, tenant_of(raw_request), body)
    job = await EmbeddingJob.start(
        ctx, raw_request, prompts, params, priority, arrival_time, adapter, body.cache_salt
    )
    try:
        embeddings = await job.collect()
    finally:
        job.close()
    if sum(e.numel() for e in embeddings) < OFF_LOOP_MIN_VALUES:
        content = _response_json(job, embeddings, body.encoding_format)
    else:
        content = await asyncio.to_thread(_response_json, job, embeddings, body.encoding_format)
    return Response(content, media_type="application/json", headers=job.rate_limit_headers())


def embedding_prompts(
    tokenizer: Tokenizer | None, inputs: PromptInput, add_special_tokens: bool
) -> list[Prompt]:
    """Each entry of `input` (a text, token ids, or a batch of either) as a Prompt; a 400 naming
    `input` for an empty one."""
    entries: list[str | list[int]]
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        entries = [inputs]  # one text, or one prompt of token ids
    else:
        entries = list(inputs)  # type: ignore[arg-type]
    if not entries or any(not entry for entry in entries):
        raise InvalidRequestError("the input is empty: give a text or token ids", "input")
    return [
        Prompt(encode_text(tokenizer, e, "input", add_special_tokens), e)
        if isinstance(e, str)
        else Prompt(list(e))
        for e in entries
    ]


def encode_embedding(embedding: torch.Tensor, encoding_format: str) -> list[float] | str:
    """The values as JSON floats, or (base64) their float32 bytes, little-endian, in base64."""
    if encoding_format == "base64":
        values = embedding.numpy().astype("<f4", copy=False)
        return base64.b64encode(values.tobytes()).decode("ascii")
    return embedding.tolist()


def _response_json(
    job: EmbeddingJob, embeddings: list[torch.Tensor], encoding_format: str
) -> bytes:
    tokens = job.num_prompt_tokens
    response = EmbeddingResponse(
        id=f"embd-{job.id}",
        model=job.model,
        data=[
            EmbeddingData(index=i, embedding=encode_embedding(e, encoding_format))
            for i, e in enumerate(embeddings)
        ],
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )
    return response.model_dump_json().encode()


def _priority(ctx: ServerContext, tenant: Tenant, body: EmbeddingRequest) -> int:
    """The priority it runs at: bounded by its tenant's with a tenants file (as generation's)."""
    if ctx.tenants.table is None:
        return body.priority
    asked = body.priority if "priority" in body.model_fields_set else None
    return tenant.effective_priority(asked)
