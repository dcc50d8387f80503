"""The router's own errors, in OpenAI's shape ({"error": {"message", "type", "param", "code"}}).

The router never judges a request's content: input it can't parse is still forwarded, so a client
gets exactly the engine's answer to bad input. Its own errors are about routing: a missing API key
(401), no healthy replica (503), every attempt failed (502).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.protocol import ErrorInfo, ErrorResponse

_TYPES = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error"}


class RouterError(Exception):
    def __init__(
        self,
        status_code: int,
        message: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


def error_json(status_code: int, message: str, code: str | None = None) -> str:
    error_type = _TYPES.get(status_code, "invalid_request_error" if status_code < 500 else "server_error")  # fmt: skip
    info = ErrorInfo(message=message, type=error_type, code=code)
    return ErrorResponse(error=info).model_dump_json()


def error_response(error: RouterError) -> JSONResponse:
    body = ErrorResponse.model_validate_json(error_json(error.status_code, error.message, error.code))  # fmt: skip
    return JSONResponse(body.model_dump(), status_code=error.status_code, headers=error.headers)


def install_error_handlers(app: FastAPI) -> None:
    async def on_router_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RouterError)
        return error_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(RouterError(exc.status_code, str(exc.detail), headers=exc.headers))

    app.add_exception_handler(RouterError, on_router_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
