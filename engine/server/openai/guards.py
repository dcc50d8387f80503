"""Checks that run before a route's handler: draining, model name. The API key's guard is
pagedock/http/auth.py's, shared with the router."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from engine.server.openai.context import ServerContext
from pagedock.http.errors import APIError


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


def check_model(ctx: ServerContext, model: str | None) -> None:
    """A request may name the served model or none; any other name is a 404, as OpenAI answers."""
    if model is not None and model != ctx.served_model_name:
        raise APIError(
            404,
            f"the model {model!r} does not exist; this server serves {ctx.served_model_name!r}",
            param="model",
            code="model_not_found",
        )
