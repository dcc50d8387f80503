"""GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: a stored response, read
as its own tenant's only. Another tenant's, one never stored (`store: false`), deleted or expired
are alike: a 404, as for an id that never existed."""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import Response

from engine.server.openai.context import ServerContext
from pagedock.http.errors import APIError
from pagedock.protocol.response_items import InputItemList
from pagedock.protocol.responses import DeletedResponse
from pagedock.responses_store.stored_response import StoredResponse


async def retrieve_response(ctx: ServerContext, tenant: str, response_id: str) -> Response:
    record = await _stored(ctx, tenant, response_id)
    return Response(json.dumps(record.response), media_type="application/json")


async def delete_response(ctx: ServerContext, tenant: str, response_id: str) -> DeletedResponse:
    if not await ctx.responses_store.delete(tenant, response_id):
        raise _not_found(response_id)
    return DeletedResponse(id=response_id)


async def list_input_items(
    ctx: ServerContext,
    tenant: str,
    response_id: str,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
) -> InputItemList:
    """The response's own input items (not the earlier turns'), newest first unless `order` is
    asc; `after` an item id: those that follow it in that order."""
    record = await _stored(ctx, tenant, response_id)
    items: list[dict[str, Any]] = list(record.input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise APIError(400, f"no input item with id {after!r} in this response", "after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return InputItemList.model_validate(
        {
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


async def _stored(ctx: ServerContext, tenant: str, response_id: str) -> StoredResponse:
    record = await ctx.responses_store.get(tenant, response_id)
    if record is None:
        raise _not_found(response_id)
    return record


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id {response_id!r} not found.", "response_id")
