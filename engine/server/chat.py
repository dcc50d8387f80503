"""POST /v1/chat/completions: the chat template, then generation, as one JSON or an SSE stream."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request, Response

from engine.errors import InvalidRequestError
from engine.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatResponseMessage,
    DeltaMessage,
    UsageInfo,
    now_s,
    response_exclusions,
)
from engine.server.context import ServerContext
from engine.server.errors import to_api_error
from engine.server.generation import ChoiceDelta, Generation
from engine.server.guards import check_model
from engine.server.logprobs import chat_logprobs
from engine.server.prompt_work import chat_chars, check_prompt_chars, in_prompt_pool
from engine.server.sampling import (
    continuation_headers,
    continuation_token_ids,
    to_sampling_params,
)
from engine.server.sse import SSE_DONE, sse_data, sse_error, sse_response
from engine.text.prompt_renderer import render_chat


async def create_chat_completion(
    ctx: ServerContext, body: ChatCompletionRequest, raw_request: Request
) -> Response:
    arrival_time = time.monotonic()
    check_model(ctx, body.model)
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequestError("top_logprobs needs logprobs: true", "top_logprobs")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    params = to_sampling_params(body, body.resolved_max_tokens, logprobs)
    prior = continuation_token_ids(body, 1)
    check_prompt_chars(ctx, chat_chars(body), "messages")
    prompt = await in_prompt_pool(ctx, render_chat, ctx.tokenizer, body)
    gen = await Generation.start(
        ctx, raw_request, [prompt], params, body.priority, arrival_time, prior
    )
    if body.stream:
        return sse_response(_stream(ctx, body, gen), continuation_headers(prior))
    try:
        choices = await gen.collect()
    finally:
        gen.close()
    response = ChatCompletionResponse(
        id=f"chatcmpl-{gen.id}",
        model=ctx.served_model_name,
        choices=[
            ChatChoice(
                index=c.index,
                message=ChatResponseMessage(content=_echo(body) + c.text),
                logprobs=chat_logprobs(ctx.tokenizer, c.logprobs) if body.logprobs else None,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
                token_ids=c.token_ids,
            )
            for c in choices
        ],
        usage=gen.usage(),
        prompt_token_ids=prompt.token_ids,
    )
    exclude = response_exclusions(True, body.return_token_ids)
    return Response(response.model_dump_json(exclude=exclude), media_type="application/json")


async def _stream(
    ctx: ServerContext, body: ChatCompletionRequest, gen: Generation
) -> AsyncIterator[str]:
    created = now_s()
    exclude = response_exclusions(body.include_usage, body.return_token_ids)
    prompt_token_ids: list[int] | None = gen.prompts[0].token_ids  # in the first chunk only

    def chunk(choices: list[ChatChunkChoice], usage: UsageInfo | None = None) -> str:
        nonlocal prompt_token_ids
        message = ChatCompletionChunk(
            id=f"chatcmpl-{gen.id}",
            created=created,
            model=ctx.served_model_name,
            choices=choices,
            usage=usage,
            prompt_token_ids=prompt_token_ids,
        )
        prompt_token_ids = None
        return sse_data(message.model_dump_json(exclude=exclude))

    try:
        if body.continuation is None:  # a continuation's client has had the role chunk
            echo = _echo(body) or ""
            yield chunk(
                [
                    ChatChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=echo))
                    for i in gen.choices
                ]
            )
        async for deltas in gen.deltas():
            yield chunk([_chunk_choice(ctx, body, d) for d in deltas])
        if body.include_usage:
            yield chunk([], gen.usage())
    except Exception as e:
        yield sse_error(to_api_error(e))
    finally:
        gen.close()
    yield SSE_DONE


def _chunk_choice(
    ctx: ServerContext, body: ChatCompletionRequest, delta: ChoiceDelta
) -> ChatChunkChoice:
    return ChatChunkChoice(
        index=delta.index,
        delta=DeltaMessage(content=delta.text or None),
        logprobs=chat_logprobs(ctx.tokenizer, delta.logprobs) if body.logprobs else None,
        finish_reason=delta.finish_reason,
        stop_reason=delta.stop_reason,
        token_ids=delta.token_ids,
    )


def _echo(body: ChatCompletionRequest) -> str:
    """vLLM's chat `echo`: the response starts with the last message when it is the assistant's
    (a continuation); otherwise nothing."""
    last = body.messages[-1]
    if not body.echo or last.role != "assistant":
        return ""
    return body.template_messages()[-1]["content"]
