"""Server-sent events, as OpenAI streams them: `data: {json}` blocks, then `data: [DONE]`."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from pagedock.http.errors import APIError, error_json

SSE_DONE = "data: [DONE]\n\n"


def sse_data(payload_json: str) -> str:
    return f"data: {payload_json}\n\n"


def sse_error(error: APIError) -> str:
    """A failure after the 200 was sent: the error object as one more event (as vLLM does)."""
    return sse_data(error_json(error.status_code, error.message, error.param, error.code))


def sse_response(
    events: AsyncIterator[str], headers: dict[str, str] | None = None
) -> StreamingResponse:
    # no-cache and no proxy buffering: each event must reach the client as soon as it exists.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)
