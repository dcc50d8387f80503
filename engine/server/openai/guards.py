"""Checks that run before a route's handler: draining, model name (the base model's or a LoRA
adapter's), a continuation's origin. The API key's guard is pagedock/http/auth.py's, shared with
the router."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from engine.inputs.engine_request import AdapterRef
from engine.server.openai.context import ServerContext
from pagedock.http.errors import APIError
from pagedock.http.internal_key import check_continuation_allowed
from pagedock.protocol.openai import SamplingFields


def admitting_guard(ctx: ServerContext) -> Callable[[], Awaitable[None]]:
    async def require_admitting() -> None:
        if ctx.draining:
            raise APIError(
                503,
                "the server is shutting down and accepts no new requests",
                code="draining",
                headers={"Retry-After": "1"},
            )
        if not ctx.engine.is_alive:
            raise APIError(503, "the engine loop is not running", code="engine_dead")

    return require_admitting


def resolve_model(ctx: ServerContext, model: str | None) -> AdapterRef | None:
    """The LoRA adapter a request's `model` names; None for the served model (or no name). Any
    other name is a 404, as OpenAI answers (an adapter unloaded meanwhile is the engine's
    UnknownAdapterError, the same 404)."""
    if model is None or model == ctx.served_model_name:
        return None
    registry = ctx.loras
    if model in registry:
        return AdapterRef(model)
    served = ", ".join(repr(name) for name in [ctx.served_model_name, *registry])
    raise APIError(
        404,
        f"the model {model!r} does not exist; this server serves {served}",
        param="model",
        code="model_not_found",
    )


def require_trusted_continuation(
    ctx: ServerContext, body: SamplingFields, request: Request
) -> None:
    """A body with `continuation` only from the fleet's routers, when an internal key is set
    (pagedock/http/internal_key.py): a 403 for anyone else."""
    if body.continuation is not None:
        check_continuation_allowed(ctx.options.internal_api_key, request)
