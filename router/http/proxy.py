"""Proxy: sends a request to the replicas of a decision in order, with bounded failover.

    connect error, a replica failure       -> replica marked unhealthy, next replica tried
    before the first byte                     (max_attempts)
    429 from a replica                     -> next replica tried, none marked
    404 to a request naming a model        -> the replica does not serve it (any more): it
                                              leaves the model's candidates, next replica tried
    4xx or a request's 500 from a replica  -> passed through, never retried
                                              (router/http/upstream_errors.py decides)
    2xx, non-streaming                     -> the whole body, then the client's 200
    2xx, streaming                         -> chunks passed on as they arrive; a failure
                                              mid-stream resumes it on another replica
                                              (router/http/stream_failover.py) or, when it
                                              can't be, ends the client's stream with an SSE
                                              error event

A client that disconnects closes the replica connection too, so the engine aborts the request.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive

from pagedock.http.errors import APIError
from pagedock.http.internal_key import internal_key_headers
from pagedock.request_ids import current_request
from pagedock.tenancy.tenants import TENANT_HEADER
from router.demand import DemandTracker
from router.http.route_trace import trace_of
from router.http.stream_failover import StreamFailover, sse_error_event
from router.http.stream_resume import Resumable, ResumePlan, Segment
from router.http.upstream import UPSTREAM_ERRORS, AttemptFailed, make_session
from router.http.upstream_errors import Verdict, classify_upstream, refuses_model
from router.metrics import RouterMetrics
from router.policies.dispatcher import Decision, Dispatcher
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet
from router.replicas.stall_watch import ReplicaStalled, StreamWatch, unless_stalled

logger = logging.getLogger("pagedock.router")
T = TypeVar("T")
# `traceparent`/`tracestate`: W3C Trace Context, so the engine's spans join the caller's trace.
_FORWARDED_REQUEST_HEADERS = (
    "content-type",
    "accept",
    "x-request-id",
    "user-agent",
    "traceparent",
    "tracestate",
)
_FORWARDED_RESPONSE_HEADERS = ("retry-after", "www-authenticate", "x-request-id")
REPLICA_HEADER = "x-pagedock-replica"  # which replica served the request (debugging, tests)
# The prompt tokens the router expected the replica to hold (how good its cache view is): only
# with --predicted-cached-tokens-header (benchmarks, tests). It would tell a client which
# prefixes are cached, block by block; the router's metrics carry it for everyone else.
PREDICTED_CACHED_HEADER = "x-pagedock-predicted-cached-tokens"
DISPATCH_HEADER = "x-pagedock-dispatch-seq"  # this router's dispatch order (held requests, tests)
# HTTP allows tab in a field value; other C0 controls and DEL are refused by the upstream client
# (header injection), which would otherwise surface as a 500.
_CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Forwarding:
    """One request on its way to its decision's replicas: what every attempt sends."""

    request: Request
    headers: dict[str, str]
    body: bytes
    decision: Decision
    stream: bool
    resumable: Resumable | None


class Proxy:
    def __init__(
        self,
        dispatcher: Dispatcher,
        replica_set: ReplicaSet,
        metrics: RouterMetrics,
        replica_api_key: str | None,
        demand: DemandTracker | None = None,
    ) -> None:
        self.demand = demand or DemandTracker()
        self.dispatcher = dispatcher
        self.replica_set = replica_set
        self.metrics = metrics
        self.replica_api_key = replica_api_key
        self._session: aiohttp.ClientSession | None = None
        self._failover = StreamFailover(dispatcher, replica_set, metrics, self._exchange)

    async def start(self) -> None:
        """Open the upstream session (on the event loop it will run on)."""
        self._session = make_session(self.dispatcher.config)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(
        self,
        request: Request,
        body: bytes,
        decision: Decision,
        stream: bool,
        arrival: float,
        plan: ResumePlan | None = None,
    ) -> Response:
        """Try the decision's replicas in order; the first that answers wins. A stream with a
        `plan` is resumed elsewhere if its replica fails after the first byte."""
        headers = self._headers(request)
        resumable = None
        if plan is not None:
            body, resumable = plan.body(), Resumable(request, headers, decision, plan)
        job = Forwarding(request, headers, body, decision, stream, resumable)
        last: AttemptFailed | None = None
        for attempt, replica in enumerate(decision.replicas[: self.dispatcher.config.max_attempts]):
            if attempt:
                self.metrics.observe_retry(replica.url, last.cause if last else "unknown")
            else:
                self.metrics.observe_overhead(time.perf_counter() - arrival)
            try:
                return await self._attempt(job, replica)
            except AttemptFailed as failed:
                last = failed
                if failed.mark_unhealthy:
                    self.replica_set.mark_unhealthy(replica, failed.cause)
        if last is not None and last.response is not None:
            return last.response  # e.g. every replica answered 503: say what the last one said
        self.metrics.observe_failure(last.cause if last else "no_replica")
        raise APIError(
            502,
            f"no replica could serve the request ({last.cause if last else 'none'})",
            code="replicas_unavailable",
        )

    async def _attempt(self, job: Forwarding, replica: Replica) -> Response:
        """One try at `replica` (traced as an upstream span, when tracing is on)."""
        trace = trace_of(job.request)
        if trace is None:
            return await self._try(job, replica, job.headers)

        def send(sent: dict[str, str]) -> Awaitable[Response]:
            return self._try(job, replica, sent)

        return await trace.attempt(replica.url, job.headers, send, lambda r: r.status_code)

    async def _try(self, job: Forwarding, replica: Replica, headers: dict[str, str]) -> Response:
        """One try at `replica`, sending `headers` (the job's, with this try's trace context)."""
        request, decision = job.request, job.decision
        request_id = uuid.uuid4().hex
        cached_tokens = self.dispatcher.commit(decision, replica, request_id)
        self.metrics.observe_decision(
            replica.url, decision.reason, cached_tokens, decision.lora_name
        )
        seq = str(self.demand.dispatched(replica.url, cached_tokens))
        grace_s = self.dispatcher.config.stall_eject_s
        try:
            upstream, content = await until_disconnect(
                request,
                unless_stalled(
                    replica,
                    self._exchange(request, headers, job.body, replica, job.stream),
                    grace_s,
                ),
            )
        except ReplicaStalled as e:  # already out of the healthy set: try the next replica
            replica.end(request_id)
            raise AttemptFailed("stalled", mark_unhealthy=False) from e
        except BaseException:
            replica.end(request_id)
            raise
        if content is None:
            response = await self._streamed(upstream, replica, request_id, job.resumable)
        else:
            replica.end(request_id)
            response = _buffered(upstream, content, replica, decision.model)
        if self.dispatcher.config.predicted_cached_tokens_header:
            response.headers[PREDICTED_CACHED_HEADER] = str(cached_tokens)
        response.headers[DISPATCH_HEADER] = seq
        return response

    async def _exchange(
        self, request: Request, headers: dict[str, str], body: bytes, replica: Replica, stream: bool
    ) -> tuple[aiohttp.ClientResponse, bytes | None]:
        """The replica's answer: its headers and, unless it is a stream to pass through, its whole
        body (a failure before its end is retried: the client has nothing yet)."""
        assert self._session is not None, "Proxy.start() was not called"
        url = replica.url + request.scope["path"]
        query = request.query_params.multi_items() or None  # e.g. input_items' order and limit
        try:
            upstream = await self._session.request(
                request.method,
                url,
                params=query,
                data=body or None,
                headers=headers,
                allow_redirects=False,
            )
            if stream and upstream.status == 200:
                return upstream, None
            return upstream, await upstream.read()  # read() closes the connection if it fails
        except UPSTREAM_ERRORS as e:
            raise AttemptFailed(type(e).__name__, mark_unhealthy=True) from e

    async def _streamed(
        self,
        upstream: aiohttp.ClientResponse,
        replica: Replica,
        request_id: str,
        resumable: Resumable | None,
    ) -> Response:
        """Wait for the first chunk (a failure before it is retried), then pass chunks through."""
        chunks = upstream.content.iter_any()  # each chunk as it arrives, never waiting for more
        try:
            first = await unless_stalled(
                replica, anext(chunks), self.dispatcher.config.stall_eject_s
            )
        except (*UPSTREAM_ERRORS, StopAsyncIteration, ReplicaStalled) as e:
            replica.end(request_id)
            upstream.close()
            stalled = isinstance(e, ReplicaStalled)
            raise AttemptFailed(
                "stalled" if stalled else type(e).__name__, mark_unhealthy=not stalled
            ) from e
        replica.first_byte(request_id)
        media_type = upstream.headers.get("content-type", "text/event-stream")
        if resumable is None:
            body = self._relay(first, chunks, upstream, replica, request_id)
        else:
            segment = Segment(first, chunks, upstream, replica, request_id)
            body = self._failover.relay(segment, resumable)
        headers = {**_response_headers(upstream), **_SSE_HEADERS, REPLICA_HEADER: replica.url}
        return StreamingResponse(body, 200, headers, media_type)

    async def _relay(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        upstream: aiohttp.ClientResponse,
        replica: Replica,
        request_id: str,
    ) -> AsyncIterator[bytes]:
        last = first
        watch = StreamWatch(replica, self.dispatcher.config.stall_eject_s, upstream.close)
        try:
            yield first
            async for chunk in chunks:
                watch.chunk()
                last = chunk
                yield chunk
            if watch.stalled:  # the closed connection may read as a clean end
                raise ReplicaStalled(replica.url)
        except (*UPSTREAM_ERRORS, ReplicaStalled) as e:
            cause = "stalled" if watch.stalled else type(e).__name__
            logger.warning("stream from %s broke: %s", replica.url, cause)
            self.metrics.observe_failure("mid_stream")
            yield sse_error_event(f"the replica failed mid-stream ({cause})", last)
        finally:
            watch.stop()
            replica.end(request_id)
            upstream.close()  # a client that left closes the replica's connection: it aborts

    def _headers(self, request: Request) -> dict[str, str]:
        """The client's headers that reach the replica; a control character in one is the
        client's error (400), found before any replica is tried."""
        headers = {k: v for k in _FORWARDED_REQUEST_HEADERS if (v := request.headers.get(k))}
        ids = current_request.get()
        if ids is not None:  # the id this router logs the request under, made when none came
            headers["x-request-id"] = ids.x_request_id
        authorization = (
            f"Bearer {self.replica_api_key}"
            if self.replica_api_key
            else request.headers.get("authorization")
        )
        if authorization:
            headers["authorization"] = authorization
        tenant = getattr(request.state, "tenant", None)
        if tenant is not None:
            # The engines' fair queues and per-tenant metrics; they trust it with the internal key.
            headers[TENANT_HEADER] = tenant
            headers |= internal_key_headers(self.dispatcher.config.internal_api_key)
        for name, value in headers.items():
            if _CONTROL_CHARACTER.search(value):
                raise APIError(400, f"the {name} header contains a control character", param=name)
        return headers


def _buffered(
    upstream: aiohttp.ClientResponse, content: bytes, replica: Replica, model: str | None
) -> Response:
    """The replica's whole answer for the client; one that says another replica may serve the
    request (a 429, a replica failure, a model it does not serve) fails the attempt, carrying
    it."""
    status = upstream.status
    headers = {**_response_headers(upstream), REPLICA_HEADER: replica.url}
    response = Response(content, status, headers, upstream.headers.get("content-type"))
    if model is not None and refuses_model(status, content):
        replica.forget_model(model)
        raise AttemptFailed("model_not_found", False, response)
    verdict = classify_upstream(status, content)
    if verdict is not Verdict.FORWARD:
        raise AttemptFailed(f"http_{status}", verdict is Verdict.REPLICA_FAILED, response)
    return response


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """`work`, cancelled when the client disconnects first (the replica connection closes with
    it)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        raise APIError(499, "the client disconnected", code="client_disconnected")
    return task.result()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _response_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k in _FORWARDED_RESPONSE_HEADERS if (v := upstream.headers.get(k))}
