"""RequestIds: who a request is to logs and traces, for as long as it is served (a context
variable set by pagedock/http/request_context.py) and after (`remember` keeps them under a key for
what is written later, outside the request: the engine's end-of-request line and spans)."""

from __future__ import annotations

from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass

MAX_REMEMBERED = 4096
"""Keys whose ids are held at most (the oldest go: their late lines then lack them)."""


@dataclass(frozen=True)
class RequestIds:
    x_request_id: str
    """The client's `x-request-id`, or one made for the request."""
    traceparent: str | None = None
    """The request's valid W3C `traceparent`, normalised (None: it came without one)."""

    @property
    def trace_id(self) -> str | None:
        return None if self.traceparent is None else self.traceparent.split("-")[1]

    @property
    def span_id(self) -> str | None:
        """The caller's span: the parent of whatever this request's work traces."""
        return None if self.traceparent is None else self.traceparent.split("-")[2]

    def log_fields(self) -> dict[str, str]:
        """The fields a log line about this request carries (trace_id and span_id, as
        OpenTelemetry's log data model names them, only when it came with a traceparent)."""
        fields = {"x_request_id": self.x_request_id}
        if self.trace_id is not None and self.span_id is not None:
            fields |= {"trace_id": self.trace_id, "span_id": self.span_id}
        return fields


current_request: ContextVar[RequestIds | None] = ContextVar("current_request", default=None)
_remembered: OrderedDict[str, RequestIds] = OrderedDict()


def remember(key: str) -> None:
    """Keep the current request's ids under `key` (a generation's id), for what is written later
    outside the request's context."""
    ids = current_request.get()
    if ids is not None:
        _remembered[key] = ids
        while len(_remembered) > MAX_REMEMBERED:
            _remembered.popitem(last=False)


def remembered(key: str) -> RequestIds | None:
    return _remembered.get(key)
