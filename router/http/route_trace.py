"""RouteTrace: one request's spans in the router, when tracing is on (pagedock/tracing/).

    router_request        arrival -> the answer's last byte; the caller's traceparent its parent
      flow_queue          the wait for a flow slot (only when it waited)
      route               the decision: the chosen replica, the reason, every candidate's
                          cached and queued tokens
      upstream            one per attempt (client kind) -> the replica's first byte; its
                          traceparent goes to the engine, whose llm_request span is its child
    events                failover (a replica failed before the first byte: which, why),
                          stream_resumed / stream_not_resumed (after it)

An error (4xx/5xx answer, a failure) sets the status ERROR with what the client was told. Off,
requests carry no RouteTrace and pay one attribute lookup.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request

from pagedock.http.request_context import valid_traceparent
from pagedock.tracing.tracer import parent_context, traceparent_of
from router.http.upstream import AttemptFailed
from router.policies.dispatcher import Decision

T = TypeVar("T")


def trace_of(request: Request | None) -> RouteTrace | None:
    """The request's RouteTrace; None when tracing is off (or there is no request: tests)."""
    trace: RouteTrace | None = getattr(getattr(request, "state", None), "trace", None)
    return trace


class RouteTrace:
    def __init__(self, tracer: Any, request: Request, tenant: str) -> None:
        from opentelemetry.trace import SpanKind, set_span_in_context

        self.tracer = tracer
        parent = parent_context(valid_traceparent(request.headers.get("traceparent")))
        self.span = tracer.start_span(
            "router_request",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": request.method,
                "url.path": request.url.path,
                "pagedock.tenant": tenant,
            },
        )
        self.context = set_span_in_context(self.span)
        self.ended = False

    def waited(self, seconds: float) -> None:
        """The request waited `seconds` for a flow slot, ending now."""
        if seconds > 0:
            now = time.time_ns()
            span = self.tracer.start_span(
                "flow_queue", context=self.context, start_time=now - int(seconds * 1e9)
            )
            span.end(end_time=now)

    def routed(self, decision: Decision, started_ns: int) -> None:
        """The dispatcher's decision, made from `started_ns` until now."""
        chosen = decision.replicas[0].url if decision.replicas else ""
        candidates = [
            f"{url} cached={c.cached_tokens} queued={c.queued_tokens}"
            for url, c in decision.candidates.items()
        ]
        attributes: dict[str, Any] = {
            "pagedock.route.reason": decision.reason,
            "pagedock.route.replica": chosen,
            "pagedock.route.candidates": candidates,
        }
        if decision.blocks is not None:
            attributes["gen_ai.usage.prompt_tokens"] = decision.blocks.num_prompt_tokens
        if decision.model is not None:
            attributes["gen_ai.request.model"] = decision.model
        if decision.lora_name is not None:
            attributes["pagedock.adapter"] = decision.lora_name
        self.span.set_attributes(attributes)
        span = self.tracer.start_span(
            "route", context=self.context, start_time=started_ns, attributes=attributes
        )
        span.end()

    async def attempt(
        self,
        replica_url: str,
        headers: dict[str, str],
        send: Callable[[dict[str, str]], Awaitable[T]],
        status_of: Callable[[T], int],
        resume: bool = False,
    ) -> T:
        """`send(headers)` to `replica_url` as an upstream span, its traceparent in the headers;
        the span ends with the answer (`status_of` it) or the failure."""
        from opentelemetry.trace import SpanKind

        span = self.tracer.start_span(
            "upstream",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes={"pagedock.replica": replica_url, "pagedock.resume": resume},
        )
        try:
            answer = await send({**headers, "traceparent": traceparent_of(span)})
        except AttemptFailed as failed:
            status = failed.response.status_code if failed.response is not None else None
            self.attempt_ended(span, status, failed.cause)
            raise
        except BaseException as e:
            self.attempt_ended(span, None, type(e).__name__)
            raise
        self.attempt_ended(span, status_of(answer))
        return answer

    def attempt_ended(self, span: Any, status: int | None, failure: str | None = None) -> None:
        """The try got an answer with `status` (its first byte, for a stream), or failed."""
        from opentelemetry.trace import Status, StatusCode

        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if failure is not None:
            span.set_status(Status(StatusCode.ERROR, failure))
            replica = span.attributes.get("pagedock.replica", "") if span.attributes else ""
            event = {"pagedock.replica": str(replica), "pagedock.cause": failure}
            self.span.add_event("failover", event)
        span.end()

    def resumed(self, replica_url: str | None, cause: str) -> None:
        """A stream whose replica failed after the first byte (`cause`) went on at
        `replica_url` (None: nowhere would take it)."""
        if replica_url is None:
            self.span.add_event("stream_not_resumed", {"pagedock.cause": cause})
        else:
            event = {"pagedock.replica": replica_url, "pagedock.cause": cause}
            self.span.add_event("stream_resumed", event)

    def end(self, status: int, error: str | None = None) -> None:
        """The answer is over: its status (and the error the client was told)."""
        if self.ended:
            return
        self.ended = True
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("http.response.status_code", status)
        if error is not None or status >= 400:
            self.span.set_status(Status(StatusCode.ERROR, error or f"HTTP {status}"))
        self.span.end()
