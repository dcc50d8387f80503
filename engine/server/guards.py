"""Checks that run before a route's handler: API key, draining, model name."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from engine.server.context import ServerContext
from engine.server.errors import APIError

# auto_error=False: a missing header is our 401 in OpenAI's shape, not FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="The server's --api-key, when it has one.")


def api_key_guard(ctx: ServerContext) -> Callable[..., Awaitable[None]]:
    async def require_api_key(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        expected = ctx.options.api_key
        if expected is None:
            return
        given = "" if credentials is None else credentials.credentials
        # Constant-time comparison: response timing must not reveal how much of a guess matched.
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise APIError(
                401,
                "missing or invalid API key: send `Authorization: Bearer <key>`",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return require_api_key


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
