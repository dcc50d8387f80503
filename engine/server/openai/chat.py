"""POST /v1/chat/completions: the chat template, then generation, as one JSON or an SSE stream."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request, Response

from engine.server.openai.context import ServerContext
from engine.server.openai.errors import to_api_error
from engine.server.openai.generation import ChoiceDelta, ChoiceState, Generation
from engine.server.openai.guards import resolve_model
from engine.server.openai.handoff import HandedOff, hands_off
from engine.server.openai.logprobs import (
    answer_body,
    answer_json,
    chat_logprobs,
    num_logprob_entries,
    num_prompt_entries,
    prompt_logprobs_field,
)
from engine.server.openai.prompt_work import chat_chars, check_prompt_chars, in_prompt_pool
from engine.server.openai.sampling import (
    chat_sampling_params,
    continuation_headers,
    continuation_token_ids,
)
from engine.server.tenancy.tenant_resolver import tenant_of
from engine.tool_calls.chat_tools import TOOL_CALLS, ToolCalling, ToolDeltas
from pagedock.http.sse import SSE_DONE, sse_data, sse_error, sse_response
from pagedock.protocol import (
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
from pagedock.protocol.openai import HANDOFF_EVENT, PromptLogprobsField
from pagedock.text.prompt_renderer import render_chat


async def create_chat_completion(
    ctx: ServerContext, body: ChatCompletionRequest, raw_request: Request
) -> Response:
    arrival_time = time.monotonic()
    adapter = resolve_model(ctx, body.model)
    params, tools = chat_sampling_params(ctx.options, body)
    prior = continuation_token_ids(body, 1)
    check_prompt_chars(ctx, chat_chars(body), "messages")
    prompt = await in_prompt_pool(ctx, render_chat, ctx.tokenizer, body)
    gen = await Generation.start(
        ctx,
        raw_request,
        [prompt],
        params,
        ctx.tenants.priority(tenant_of(raw_request), body),
        arrival_time,
        prior,
        adapter,
        body.cache_salt,
    )
    if body.stream:
        headers = {**gen.rate_limit_headers(), **(continuation_headers(prior) or {})}
        return sse_response(_stream(ctx, body, gen, tools, prior), headers)
    try:
        choices = await gen.collect()
    finally:
        gen.close()
    usage = gen.usage()
    entries = num_logprob_entries(choices, params.logprobs)
    entries += num_prompt_entries(gen.prompt_logprobs.get(0), body.prompt_logprobs)
    content = await answer_body(
        entries, lambda: _response_json(ctx, body, gen, choices, tools, usage)
    )
    return Response(content, media_type="application/json", headers=gen.rate_limit_headers())


def _response_json(
    ctx: ServerContext,
    body: ChatCompletionRequest,
    gen: Generation,
    choices: list[ChoiceState],
    tools: ToolCalling | None,
    usage: UsageInfo,
) -> bytes:
    """The whole non-streamed answer as JSON (any thread: `gen` has finished)."""
    response = ChatCompletionResponse(
        id=f"chatcmpl-{gen.id}",
        model=gen.model,
        choices=[_choice(ctx, body, c, tools) for c in choices],
        usage=usage,
        prompt_token_ids=gen.prompts[0].token_ids,
        prompt_logprobs=_prompt_logprobs(body, gen),
    )
    return answer_json(response, response_exclusions(True, body.return_token_ids))


def _prompt_logprobs(body: ChatCompletionRequest, gen: Generation) -> PromptLogprobsField | None:
    """vLLM's `prompt_logprobs` of the rendered conversation, when the request asked."""
    prompt_logprobs = gen.prompt_logprobs.get(0)
    if body.prompt_logprobs is None or prompt_logprobs is None:
        return None
    return prompt_logprobs_field(prompt_logprobs, body.prompt_logprobs)


def _choice(
    ctx: ServerContext, body: ChatCompletionRequest, choice: ChoiceState, tools: ToolCalling | None
) -> ChatChoice:
    message, called = ChatResponseMessage(content=_echo(body) + choice.text), False
    if tools is not None:
        message, called = tools.message(choice.text, _echo(body))
    return ChatChoice(
        index=choice.index,
        message=message,
        logprobs=chat_logprobs(ctx.tokenizer, choice.logprobs) if body.logprobs else None,
        finish_reason=TOOL_CALLS if called else choice.finish_reason,
        stop_reason=choice.stop_reason,
        token_ids=choice.token_ids,
    )


async def _stream(
    ctx: ServerContext,
    body: ChatCompletionRequest,
    gen: Generation,
    tools: ToolCalling | None,
    prior: list[int] | None,
) -> AsyncIterator[str]:
    created = now_s()
    exclude = response_exclusions(body.include_usage, body.return_token_ids)
    prompt_token_ids: list[int] | None = gen.prompts[0].token_ids  # in the first chunk only
    # A continuation's client has had the deltas of the text generated before: read on from it.
    prior_text = ctx.tokenizer.decode(prior) if prior and ctx.tokenizer is not None else ""
    tool_deltas = ToolDeltas(tools, prior_text) if tools is not None else None
    gen.hands_off = hands_off(body.return_token_ids, len(gen.choices))

    def chunk(choices: list[ChatChunkChoice], usage: UsageInfo | None = None) -> str:
        nonlocal prompt_token_ids
        message = ChatCompletionChunk(
            id=f"chatcmpl-{gen.id}",
            created=created,
            model=gen.model,
            choices=choices,
            usage=usage if usage is not None or not body.continuous_usage else gen.usage(),
            prompt_token_ids=prompt_token_ids,
        )
        prompt_token_ids = None
        return sse_data(message.model_dump_json(exclude=exclude))

    role_pending = body.continuation is None  # a continuation's client has had the role chunk
    try:
        async for deltas in gen.deltas():
            # NOTE: the role chunk goes with the first output, as vLLM sends it: benchmark
            # clients (`vllm bench serve`) time the first token by the first chunk.
            if role_pending:
                role_pending = False
                yield chunk(_role_choices(body, gen), _prompt_usage(body, gen))
            yield chunk([_chunk_choice(ctx, body, d, tool_deltas) for d in deltas])
        if body.include_usage:
            yield chunk([], gen.usage())
    except HandedOff:
        yield HANDOFF_EVENT  # and no [DONE]: a router resumes the stream elsewhere
        return
    except Exception as e:
        yield sse_error(to_api_error(e))
    finally:
        gen.close()
    yield SSE_DONE


def _role_choices(body: ChatCompletionRequest, gen: Generation) -> list[ChatChunkChoice]:
    """Each choice's first delta: the role, and the echo when the request asked for it."""
    delta = DeltaMessage(role="assistant", content=_echo(body) or "")
    return [ChatChunkChoice(index=i, delta=delta) for i in gen.choices]


def _prompt_usage(body: ChatCompletionRequest, gen: Generation) -> UsageInfo | None:
    """The role chunk's continuous usage: the prompt's tokens, none generated yet (vLLM's)."""
    if not body.continuous_usage:
        return None
    return UsageInfo(prompt_tokens=gen.num_prompt_tokens, total_tokens=gen.num_prompt_tokens)


def _chunk_choice(
    ctx: ServerContext,
    body: ChatCompletionRequest,
    delta: ChoiceDelta,
    tool_deltas: ToolDeltas | None,
) -> ChatChunkChoice:
    message, finish_reason = DeltaMessage(content=delta.text or None), delta.finish_reason
    if tool_deltas is not None:
        finished = delta.finish_reason is not None
        message = tool_deltas.delta(delta.index, delta.text, finished)
        finish_reason = tool_deltas.finish_reason(delta.index, delta.finish_reason)
    return ChatChunkChoice(
        index=delta.index,
        delta=message,
        logprobs=chat_logprobs(ctx.tokenizer, delta.logprobs) if body.logprobs else None,
        finish_reason=finish_reason,
        stop_reason=delta.stop_reason,
        token_ids=delta.token_ids,
    )


def _echo(body: ChatCompletionRequest) -> str:
    """vLLM's chat `echo`: the response starts with the last message when it is the assistant's
    (a continuation); otherwise nothing."""
    last = body.messages[-1]
    if not body.echo or last.role != "assistant":
        return ""
    return body.template_messages()[-1]["content"] or ""
