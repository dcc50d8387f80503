"""Every error leaves the server in OpenAI's shape: {"error": {"message", "type", "param", "code"}}
(built by pagedock/http/errors.py, which the router shares); here, what each failure means.

Bad input is always a 4xx: FastAPI's own validation errors (malformed JSON, wrong types) become a
400 here instead of FastAPI's 422 with its own body, as OpenAI and vLLM answer. A 500 means a bug.
Each such rejection is one JSON line of the request log (`request_rejected`), never a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.inputs.engine_request import UnknownAdapterError
from pagedock.errors import EngineDeadError, InvalidRequestError, PagedockError, PromptTooLongError
from pagedock.http.errors import APIError, error_response, install_api_error_handlers
from pagedock.http.validation_process import INVALID_BODY_STATE
from pagedock.responses_store.store import ResponsesStoreError

logger = logging.getLogger("pagedock.server")
request_logger = logging.getLogger("pagedock.requests")  # engine/server/request_log.py's


class GenerationError(Exception):
    """A request failed inside the engine (not the client's fault): a 500, or an error event."""


def to_api_error(error: Exception) -> APIError:
    """The HTTP meaning of an exception raised while serving a request."""
    from engine.runtime.async_engine import QueueFullError
    from engine.structured_outputs.grammar_compiler import CompileQueueFullError

    if isinstance(error, APIError):
        return error
    if isinstance(error, UnknownAdapterError):  # a LoRA adapter is a model to the API
        param = "model" if error.param == "lora_request" else error.param
        return APIError(404, str(error), param, "model_not_found")
    if isinstance(error, PromptTooLongError):
        return APIError(400, str(error), error.param, "context_length_exceeded")
    if isinstance(error, InvalidRequestError):
        return APIError(400, str(error), error.param)
    if isinstance(error, QueueFullError):
        return APIError(429, str(error), code="queue_full", headers={"Retry-After": "1"})
    if isinstance(error, CompileQueueFullError):
        return APIError(429, str(error), code="compile_queue_full", headers={"Retry-After": "1"})
    if isinstance(error, ResponsesStoreError):
        return APIError(503, str(error), code="responses_store_unavailable")
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
    param = _where(first) or None
    parts = [f"{_where(e) or 'body'}: {e.get('msg')}" for e in errors[:5]]
    return "invalid request: " + "; ".join(parts), param


# The names pydantic gives a union's members in an error's location; not fields a client sent.
_UNION_MEMBER_NAMES = {"str", "int", "float", "bool", "list", "dict", "none"}


def _where(error: Any) -> str:
    """The dotted location of a validation error as the client wrote it: `prompt.1`, not
    `body.prompt.list[int].1` (a union's member names are pydantic's, not the client's)."""
    loc = [
        str(part)
        for part in error.get("loc", ())
        if part != "body"
        and not (isinstance(part, str) and (not part.isidentifier() or part in _UNION_MEMBER_NAMES))
    ]
    return ".".join(loc)


def install_error_handlers(app: FastAPI) -> None:
    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        # A large body's errors, from the validation process (engine/server/large_body_route.py).
        invalid = getattr(request.state, INVALID_BODY_STATE, None)
        message, param = validation_message(invalid.errors if invalid else exc.errors())
        return rejected(request, APIError(400, message, param))

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        return rejected(request, to_api_error(exc))

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return rejected(request, exc)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        message = str(exc.detail)
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's own parse of the body
            message = "the request body's JSON is nested too deeply to parse"
        return rejected(request, APIError(exc.status_code, message, headers=exc.headers))

    install_api_error_handlers(app)  # the router's answers, in OpenAI's shape; then, logged:
    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    # Errors raised on purpose are answered by the exception middleware; anything else is a bug,
    # answered as a 500 (and logged) by the server-error middleware.
    app.add_exception_handler(PagedockError, on_error)
    app.add_exception_handler(GenerationError, on_error)
    app.add_exception_handler(Exception, on_error)


def rejected(request: Request, error: APIError) -> JSONResponse:
    """The error's answer; a 4xx (bad input, an unknown model, a full queue) is logged as one
    line saying why."""
    if error.status_code < 500:
        record = {
            "event": "request_rejected",
            "path": request.url.path,
            "status": error.status_code,
            "param": error.param,
            "code": error.code,
            "message": error.message,
        }
        request_logger.info(json.dumps(record), extra={"fields": record})
    return error_response(error)
