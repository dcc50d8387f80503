"""POST /v1/responses: OpenAI's Responses API served by the chat path.

The turn (its stored conversation, then its input) becomes a chat request
(engine/server/responses/turn.py), which is checked, rendered by the chat template,
sampled and aborted on disconnect exactly as a chat completion is; its text is read back as
output items (a message, function calls). Answered as one Response, or streamed as the Responses
API's events; stored (unless `store: false`) before the client hears that it is complete.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request, Response

from engine.server.openai.context import ServerContext
from engine.server.openai.errors import to_api_error
from engine.server.openai.generation import Generation
from engine.server.openai.guards import resolve_model
from engine.server.openai.prompt_work import chat_chars, check_prompt_chars, in_prompt_pool
from engine.server.openai.sampling import chat_sampling_params
from engine.server.responses.event_writer import ResponseEventWriter
from engine.server.responses.output import (
    finish_response,
    finish_status,
    output_items,
)
from engine.server.responses.turn import ResponseTurn, open_turn, store_turn
from engine.server.tenancy.tenant_resolver import tenant_of
from engine.tool_calls import ToolCallStream
from engine.tool_calls.chat_tools import ToolCalling
from pagedock.http.errors import APIError
from pagedock.http.sse import sse_response
from pagedock.protocol.responses import ResponsesRequest, ResponsesResponse, response_shell
from pagedock.text.prompt_renderer import render_chat


async def create_response(
    ctx: ServerContext, body: ResponsesRequest, raw_request: Request
) -> Response:
    arrival_time = time.monotonic()
    adapter = resolve_model(ctx, body.model)
    tenant = tenant_of(raw_request)
    turn = await open_turn(ctx, body, tenant.name)
    params, tools = chat_sampling_params(ctx.options, turn.chat)
    check_prompt_chars(ctx, chat_chars(turn.chat), "input")
    prompt = await in_prompt_pool(ctx, render_chat, ctx.tokenizer, turn.chat)
    gen = await Generation.start(
        ctx,
        raw_request,
        [prompt],
        params,
        ctx.tenants.priority(tenant, turn.chat),
        arrival_time,
        None,
        adapter,
        body.cache_salt,
    )
    response = response_shell(body, gen.model)
    if body.stream:
        return sse_response(_stream(ctx, turn, gen, tools, response), gen.rate_limit_headers())
    try:
        [choice] = await gen.collect()
    finally:
        gen.close()
    _check_not_aborted(choice.finish_reason)
    status = finish_status(choice.finish_reason)
    response.output = output_items(choice.text, tools, status)
    finish_response(response, status, gen.usage())
    await store_turn(ctx, turn, response)
    return Response(
        response.to_json(), media_type="application/json", headers=gen.rate_limit_headers()
    )


async def _stream(
    ctx: ServerContext,
    turn: ResponseTurn,
    gen: Generation,
    tools: ToolCalling | None,
    response: ResponsesResponse,
) -> AsyncIterator[str]:
    writer = ResponseEventWriter(response, None if tools is None else ToolCallStream(tools.parser))
    try:
        yield writer.lifecycle("response.created")
        yield writer.lifecycle("response.in_progress")
        finish_reason = None
        async for deltas in gen.deltas():
            for delta in deltas:  # one choice: n is 1
                finish_reason = delta.finish_reason
                for event in writer.generated(delta.text, finish_reason is not None):
                    yield event
        _check_not_aborted(finish_reason)
        status = finish_status(finish_reason)
        for event in writer.finish(status):
            yield event
        finish_response(response, status, gen.usage())
        await store_turn(ctx, turn, response)
        yield writer.lifecycle(f"response.{status}")
    except Exception as e:
        for event in writer.failed(to_api_error(e)):
            yield event
    finally:
        gen.close()


def _check_not_aborted(finish_reason: str | None) -> None:
    """A generation the server aborted (its drain deadline) is no answer: a 503 to retry."""
    if finish_reason == "abort":
        raise APIError(
            503,
            "the server is shutting down and aborted the response; retry it",
            code="draining",
            headers={"Retry-After": "1"},
        )
