"""A Responses API turn: the conversation it continues (the stored chain of
`previous_response_id`), its own input, and the whole as the chat path's request; and, once
answered, the turn stored for the next one.

A previous response is looked up as its tenant's only: one that does not exist, was not stored
(`store: false`), was deleted, expired, or is another tenant's gets the same 400, as OpenAI
answers an unknown one (`code: previous_response_not_found`), so no tenant learns of another's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from engine.server.openai.context import ServerContext
from pagedock.http.errors import APIError
from pagedock.protocol.chat import ChatCompletionRequest
from pagedock.protocol.response_chat import chat_request
from pagedock.protocol.response_items import ConversationItem, read_input_items
from pagedock.protocol.responses import ResponsesRequest, ResponsesResponse
from pagedock.responses_store.stored_response import StoredResponse

_ITEMS: TypeAdapter[list[ConversationItem]] = TypeAdapter(list[ConversationItem])


@dataclass
class ResponseTurn:
    """One request's place in its conversation."""

    tenant: str
    """Who it belongs to: the only tenant that may read, delete or continue it."""
    history: list[dict[str, Any]]
    """The conversation before this input (the stored items, oldest first)."""
    input_items: list[ConversationItem]
    """This request's input, as items with ids."""
    chat: ChatCompletionRequest
    """The instructions, history and input as the chat path's request."""


async def open_turn(ctx: ServerContext, body: ResponsesRequest, tenant: str) -> ResponseTurn:
    """The turn `body` asks for; the 400 for an unknown previous response, or for input the
    chat path cannot take."""
    unsupported = body.unsupported_field()
    if unsupported is not None:
        raise APIError(
            400,
            f"`{unsupported}` is not supported by this server; remove it from the request",
            unsupported,
        )
    input_items = read_input_items(body.input)
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        history = await _previous_conversation(ctx, tenant, body.previous_response_id)
    items = [*_ITEMS.validate_python(history), *input_items]
    return ResponseTurn(tenant, history, input_items, chat_request(body, items))


async def _previous_conversation(
    ctx: ServerContext, tenant: str, response_id: str
) -> list[dict[str, Any]]:
    previous = await ctx.responses_store.get(tenant, response_id)
    if previous is None:
        raise APIError(
            400,
            f"Previous response with id {response_id!r} not found.",
            "previous_response_id",
            "previous_response_not_found",
        )
    return previous.conversation()


async def store_turn(ctx: ServerContext, turn: ResponseTurn, response: ResponsesResponse) -> None:
    """Keep the answered turn (when the request asked to: `store`, true by default) before the
    client hears it is complete, so a follow-up sent at once finds it."""
    if not response.store:
        return
    record = StoredResponse(
        id=response.id,
        tenant=turn.tenant,
        response=response.model_dump(mode="json", by_alias=True),
        input_items=[item.model_dump(mode="json") for item in turn.input_items],
        history=turn.history,
    )
    await ctx.responses_store.put(record)
