"""Errors in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, for the engine's
server and the router alike: one status -> type map, one body, one exception, one handler set.

Torch-free (FastAPI and Starlette only): the router answers its own errors through this too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# OpenAI's `type` per HTTP status; any other 4xx is invalid_request_error, any other 5xx
# server_error (a 502 from the router, say).
ERROR_TYPES = {
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
    """An error answered on purpose, with its status, OpenAI error fields and extra headers."""

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


def error_type(status_code: int) -> str:
    default = "invalid_request_error" if status_code < 500 else "server_error"
    return ERROR_TYPES.get(status_code, default)


def error_body(
    status_code: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The error object (pagedock/protocol/openai.py's ErrorResponse, as a plain dict)."""
    info = {"message": message, "type": error_type(status_code), "param": param, "code": code}
    return {"error": info}


def error_json(
    status_code: int, message: str, param: str | None = None, code: str | None = None
) -> str:
    """error_body as JSON text, for writers below FastAPI (ASGI middleware, SSE events)."""
    return json.dumps(error_body(status_code, message, param, code))


def error_response(error: APIError) -> JSONResponse:
    body = error_body(error.status_code, error.message, error.param, error.code)
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)


def install_api_error_handlers(app: FastAPI) -> None:
    """Answer APIError, and Starlette's own HTTP errors (404, 405, ...), in OpenAI's shape."""

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return error_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(APIError(exc.status_code, str(exc.detail), headers=exc.headers))

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
