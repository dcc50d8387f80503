"""A route whose large JSON bodies are validated in the validation process
(pagedock/http/validation_process.py), not on the server's event loop holding the GIL from the
engine thread: FastAPI's way, json.loads then validating the dict, took 190 ms of a 3 MB body.

FastAPI reads the body through `Request.json()`; here that returns, for a large body, the request
already validated (FastAPI's own validation then takes the instance as it is) or, for one that
does not validate, nothing, with the child's errors left in the request's state for the
validation-error handler to answer with (engine/server/openai/errors.py). So the route's
dependencies (the API-key, tenant and drain guards) still run first, as for any body, and the
answer is the same 400 a small body of that shape gets.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from pagedock.http.validation_process import (
    INVALID_BODY_STATE,
    LARGE_BODY_BYTES,
    InvalidBody,
    ValidationProcess,
)


class _LargeBodyRequest(Request):
    process: ValidationProcess
    model: type[BaseModel]

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) <= LARGE_BODY_BYTES:
                return await super().json()
            outcome = await self.process.validate(self.model, body)
            if isinstance(outcome, InvalidBody):
                setattr(self.state, INVALID_BODY_STATE, outcome)
                self._json = None
            else:
                self._json = outcome
        return self._json


def large_body_route(process: ValidationProcess) -> type[APIRoute]:
    """An APIRoute class whose routes validate large bodies in `process`."""

    class LargeBodyRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            model = _body_model(self)
            if model is None:
                return handler

            async def validated_in_process(request: Request) -> Response:
                parsed = _LargeBodyRequest(request.scope, request.receive)
                parsed.process, parsed.model = process, model
                return await handler(parsed)

            return validated_in_process

    return LargeBodyRoute


def _body_model(route: APIRoute) -> type[BaseModel] | None:
    """The model a route's JSON body is validated as; None: it takes no such body."""
    field = route.body_field
    annotation = getattr(getattr(field, "field_info", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None
