"""Proxy: sends a request to the replicas of a decision in order, with bounded failover.

    connect error / error or 5xx / 429 before the first byte -> replica marked unhealthy (5xx, errors),
                                                               next replica tried (max_attempts)
    4xx from a replica                                        -> passed through, never retried
    2xx, non-streaming                                        -> the whole body, then the client's 200
    2xx, streaming                                            -> chunks passed on as they arrive;
                                                               a failure mid-stream ends the client's
                                                               stream with an SSE error event

A client that disconnects closes the replica connection too, so the engine aborts the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import anyio
import httpx
from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive

from router.dispatcher import Decision, Dispatcher
from router.errors import RouterError, error_json
from router.metrics import RouterMetrics
from router.replica import Replica
from router.replica_set import ReplicaSet

logger = logging.getLogger("pagedock.router")
T = TypeVar("T")
_FORWARDED_REQUEST_HEADERS = ("content-type", "accept", "x-request-id", "user-agent")
_FORWARDED_RESPONSE_HEADERS = ("retry-after", "www-authenticate", "x-request-id")
REPLICA_HEADER = "x-pagedock-replica"  # which replica served the request (debugging, tests)
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class AttemptFailed(Exception):
    """This replica could not serve the request; the next one may."""

    def __init__(self, cause: str, mark_unhealthy: bool, response: Response | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.mark_unhealthy = mark_unhealthy
        self.response = response


class Proxy:
    def __init__(
        self,
        client: httpx.AsyncClient,
        dispatcher: Dispatcher,
        replica_set: ReplicaSet,
        metrics: RouterMetrics,
        replica_api_key: str | None,
    ) -> None:
        self.client = client
        self.dispatcher = dispatcher
        self.replica_set = replica_set
        self.metrics = metrics
        self.replica_api_key = replica_api_key

    async def forward(
        self, request: Request, body: bytes, decision: Decision, stream: bool, arrival: float
    ) -> Response:
        """Try the decision's replicas in order; the first that answers wins."""
        last: AttemptFailed | None = None
        for attempt, replica in enumerate(decision.replicas[: self.dispatcher.config.max_attempts]):  # fmt: skip
            if attempt:
                self.metrics.observe_retry(replica.url, last.cause if last else "unknown")
            else:
                self.metrics.observe_overhead(time.perf_counter() - arrival)
            try:
                return await self._attempt(request, body, decision, replica, stream)
            except AttemptFailed as failed:
                last = failed
                if failed.mark_unhealthy:
                    self.replica_set.mark_unhealthy(replica, failed.cause)
        if last is not None and last.response is not None:
            return last.response  # e.g. every replica answered 503: say what the last one said
        self.metrics.observe_failure(last.cause if last else "no_replica")
        raise RouterError(502, f"no replica could serve the request ({last.cause if last else 'none'})", code="replicas_unavailable")  # fmt: skip

    async def _attempt(
        self, request: Request, body: bytes, decision: Decision, replica: Replica, stream: bool
    ) -> Response:
        request_id = uuid.uuid4().hex
        cached_tokens = self.dispatcher.commit(decision, replica, request_id)
        self.metrics.observe_decision(replica.url, decision.reason, cached_tokens)
        upstream_request = self.client.build_request(
            request.method,
            replica.url + request.url.path,
            content=body,
            headers=self._headers(request),
        )
        try:
            upstream = await until_disconnect(request, self._send(upstream_request))
        except BaseException:
            replica.end(request_id)
            raise
        if not stream or upstream.status_code != 200:
            return await self._buffered(request, upstream, replica, request_id)
        return await self._streamed(upstream, replica, request_id)

    async def _send(self, upstream_request: httpx.Request) -> httpx.Response:
        try:
            return await self.client.send(upstream_request, stream=True)
        except httpx.HTTPError as e:
            raise AttemptFailed(type(e).__name__, mark_unhealthy=True) from e

    async def _buffered(self, request: Request, upstream: httpx.Response, replica: Replica, request_id: str) -> Response:  # fmt: skip
        """Read the whole answer (a failure before its end is retried: the client has nothing yet)."""
        try:
            content = await until_disconnect(request, upstream.aread())
        except httpx.HTTPError as e:
            raise AttemptFailed(type(e).__name__, mark_unhealthy=True) from e
        finally:
            replica.end(request_id)
            await _close(upstream)
        headers = {**_response_headers(upstream), REPLICA_HEADER: replica.url}
        response = Response(content, upstream.status_code, headers, upstream.headers.get("content-type"))  # fmt: skip
        if upstream.status_code >= 500 or upstream.status_code == 429:
            raise AttemptFailed(f"http_{upstream.status_code}", upstream.status_code >= 500, response)  # fmt: skip
        return response

    async def _streamed(self, upstream: httpx.Response, replica: Replica, request_id: str) -> Response:  # fmt: skip
        """Wait for the first chunk (a failure before it is retried), then pass chunks through."""
        chunks = upstream.aiter_raw()
        try:
            first = await anext(chunks)
        except (httpx.HTTPError, StopAsyncIteration) as e:
            replica.end(request_id)
            await _close(upstream)
            raise AttemptFailed(type(e).__name__, mark_unhealthy=True) from e
        replica.first_byte(request_id)
        media_type = upstream.headers.get("content-type", "text/event-stream")
        body = self._relay(first, chunks, upstream, replica, request_id)
        headers = {**_response_headers(upstream), **_SSE_HEADERS, REPLICA_HEADER: replica.url}
        return StreamingResponse(body, 200, headers, media_type)

    async def _relay(self, first: bytes, chunks: AsyncIterator[bytes], upstream: httpx.Response, replica: Replica, request_id: str) -> AsyncIterator[bytes]:  # fmt: skip
        last = first
        try:
            yield first
            async for chunk in chunks:
                last = chunk
                yield chunk
        except httpx.HTTPError as e:
            logger.warning("stream from %s broke: %s", replica.url, type(e).__name__)
            self.metrics.observe_failure("mid_stream")
            yield sse_error_event(f"the replica failed mid-stream ({type(e).__name__})", last)
        finally:
            replica.end(request_id)
            await _close(upstream)

    def _headers(self, request: Request) -> dict[str, str]:
        headers = {k: v for k in _FORWARDED_REQUEST_HEADERS if (v := request.headers.get(k))}
        authorization = f"Bearer {self.replica_api_key}" if self.replica_api_key else request.headers.get("authorization")  # fmt: skip
        if authorization:
            headers["authorization"] = authorization
        return headers


def sse_error_event(message: str, last_chunk: bytes) -> bytes:
    """An OpenAI-shaped error event and [DONE], starting a fresh event if the last was cut."""
    payload = json.loads(error_json(502, message, "replica_failed"))
    separator = b"" if last_chunk.endswith(b"\n\n") else b"\n\n"
    return separator + f"data: {json.dumps(payload)}\n\ndata: [DONE]\n\n".encode()


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """`work`, cancelled when the client disconnects first (the replica connection closes with it)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        raise RouterError(499, "the client disconnected", code="client_disconnected")
    return task.result()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _close(upstream: httpx.Response) -> None:
    with anyio.CancelScope(shield=True):  # the connection must close even when we are cancelled
        await upstream.aclose()


def _response_headers(upstream: httpx.Response) -> dict[str, str]:
    return {k: v for k in _FORWARDED_RESPONSE_HEADERS if (v := upstream.headers.get(k))}
