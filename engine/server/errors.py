"""Every error leaves the server in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

Bad input is always a 4xx: FastAPI's own validation errors (malformed JSON, wrong types) become a
400 here instead of FastAPI's 422 with its own body, as OpenAI and vLLM answer. A 500 means a bug.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import EngineDeadError, InvalidRequestError, PagedockError, PromptTooLongError

logger = logging.getLogger("pagedock.server")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
}


class APIError(Exception):
    """An error the server answers on purpose, with its status and OpenAI error fields."""

    def __init__(
        self,
        status_code: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


class GenerationError(Exception):
    """A request failed inside the engine (not the client's fault): a 500, or an error event."""


def error_body(
    status_code: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    error_type = _TYPES.get(
        status_code, "invalid_request_error" if status_code < 500 else "server_error"
    )
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(error: APIError) -> JSONResponse:
    body = error_body(error.status_code, error.message, error.param, error.code)
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)


def to_api_error(error: Exception) -> APIError:
    """The HTTP meaning of an exception raised while serving a request."""
    from engine.async_engine import QueueFullError

    if isinstance(error, APIError):
        return error
    if isinstance(error, PromptTooLongError):
        return APIError(400, str(error), error.param, "context_length_exceeded")
    if isinstance(error, InvalidRequestError):
        return APIError(400, str(error), error.param)
    if isinstance(error, QueueFullError):
        return APIError(429, str(error), code="queue_full", headers={"Retry-After": "1"})
    if isinstance(error, EngineDeadError):
        return APIError(503, str(error), code="engine_dead")
    if isinstance(error, GenerationError):
        return APIError(500, str(error), code="engine_error")
    logger.exception("unexpected error while serving a request", exc_info=error)
    return APIError(500, f"internal server error: {type(error).__name__}")


def validation_message(errors: Sequence[Any]) -> tuple[str, str | None]:
    """A readable message and the offending parameter from pydantic's error list."""
    if not errors:
        return "the request is invalid", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON", None
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    parts = [
        f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
        for e in errors[:5]
    ]
    return "invalid request: " + "; ".join(parts), param


def install_error_handlers(app: FastAPI) -> None:
    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, param = validation_message(exc.errors())
        return error_response(APIError(400, message, param))

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(APIError(exc.status_code, str(exc.detail), headers=exc.headers))

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(to_api_error(exc))

    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    # Errors raised on purpose are answered by the exception middleware; anything else is a bug,
    # answered as a 500 (and logged) by the server-error middleware.
    app.add_exception_handler(APIError, on_error)
    app.add_exception_handler(PagedockError, on_error)
    app.add_exception_handler(GenerationError, on_error)
    app.add_exception_handler(Exception, on_error)
