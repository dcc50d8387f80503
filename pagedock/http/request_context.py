"""RequestContextMiddleware: each request's ids (pagedock/request_ids.py), for every log line
written while it is served and for its spans. `x_request_id` is the client's `x-request-id` (or
a new one), sent back in the answer's `x-request-id` unless the app set one; a valid W3C
`traceparent` names the trace and the parent of the spans the request makes."""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pagedock.request_ids import RequestIds, current_request

# version-traceid-parentid-flags; an all-zero trace id is invalid (W3C Trace Context, 3.2.2.3).
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
MAX_REQUEST_ID_CHARS = 128


def valid_traceparent(traceparent: str | None) -> str | None:
    """A valid `traceparent` value, normalised to lower case; None for anything else."""
    value = (traceparent or "").strip().lower()
    match = TRACEPARENT.match(value)
    if match is None or match.group(1) == "0" * 32 or value.startswith("ff"):
        return None
    return value


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("x-request-id", "")[:MAX_REQUEST_ID_CHARS]
        request_id = given or uuid.uuid4().hex
        ids = RequestIds(request_id, valid_traceparent(headers.get("traceparent")))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent = list(message.get("headers", []))
                if not any(name.lower() == b"x-request-id" for name, _ in sent):
                    message["headers"] = [*sent, (b"x-request-id", request_id.encode())]
            await send(message)

        token = current_request.set(ids)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request.reset(token)
