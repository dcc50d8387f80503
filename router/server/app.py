"""build_app: the router's FastAPI application — the engine's API, proxied to the best replica.

The router never judges a request's content: input it can't parse is still forwarded, so a client
gets exactly the engine's answer to bad input. Its own errors are about routing (a missing API
key 401, no replica ready within the hold timeout, a full hold queue or no memory left for the
request's body (router/http/body_budget.py) 503 with Retry-After, every attempt failed 502), in
OpenAI's shape through the same pagedock/http/errors.py and API-key
guard as the engine's server; a model (a LoRA adapter) that ready replicas list and none serves
is its 404 `model_not_found`. Its own health does not depend on the replicas: with zero engines
(scaled to zero) it stays live and ready, holding requests (router/http/hold_queue.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect

from pagedock.http.auth import api_key_guard, docs_urls
from pagedock.http.errors import APIError, install_api_error_handlers
from pagedock.limits import MAX_BODY_BYTES  # the engine's default --max-body-bytes too
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from router.demand import demand_view
from router.http.body_budget import BodyLease, BodyLeases, lease_of
from router.http.hold_queue import HoldRefused
from router.http.proxy import until_disconnect
from router.http.root_path import RootPathMiddleware
from router.http.stream_resume import ResumePlan
from router.http.tenant_salt import salts_by_tenant, tenant_tag
from router.kv.prompt_hasher import PromptBlocks
from router.policies.dispatcher import Decision, ModelNotServed, NoReplicaError
from router.replicas.served_models import merged_model_list
from router.server.context import RouterContext


def build_app(ctx: RouterContext) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await ctx.start()
        picker = None
        try:
            if ctx.config.picker_port is not None:
                # grpc is loaded only in endpoint-picker mode (docs/gateway-api.md).
                from router.picker.picker_server import start_picker

                picker = await start_picker(ctx)
            yield
        finally:
            if picker is not None:
                from router.picker.picker_server import stop_picker

                await stop_picker(picker)
            await ctx.stop()

    app = FastAPI(
        title="pagedock router", version="1", lifespan=lifespan, **docs_urls(ctx.config.api_key)
    )
    install_api_error_handlers(app)
    app.add_middleware(BodyLeases, budget=ctx.body_budget)
    if ctx.config.root_path:
        app.add_middleware(RootPathMiddleware, root_path=ctx.config.root_path)
    _add_api_routes(app, ctx)
    _add_open_routes(app, ctx)
    app.state.ctx = ctx
    return app


def _add_api_routes(app: FastAPI, ctx: RouterContext) -> None:
    guard = [Depends(api_key_guard(ctx.config.api_key))]

    @app.post("/v1/chat/completions", dependencies=guard)
    async def chat_completions(request: Request) -> Response:
        return await _generate(ctx, request, ChatCompletionRequest)

    @app.post("/v1/completions", dependencies=guard)
    async def completions(request: Request) -> Response:
        return await _generate(ctx, request, CompletionRequest)

    @app.get("/v1/models", dependencies=guard)
    async def models(request: Request) -> Response:
        """The fleet's models: every base model and the union of the LoRA adapters the ready
        replicas serve (forwarded to one replica until any has been read)."""
        ctx.demand.arrived()
        await _hold_until_ready(ctx, request)
        known = [r.served_models for r in ctx.replica_set.healthy() if r.served_models]
        if known:
            return JSONResponse(merged_model_list(known))
        decision = await _decide(ctx, None, None)
        return await ctx.proxy.forward(request, b"", decision, False, time.perf_counter())

    # Replica URLs and their state are for operators, not for keyless clients.
    @app.get("/router/replicas", dependencies=guard)
    async def replicas() -> dict[str, Any]:
        """What the router knows of each replica (for people and tests)."""
        return {
            "policy": ctx.config.policy,
            "replicas": [_replica_view(ctx, url) for url in sorted(ctx.replica_set.replicas)],
        }


def _add_open_routes(app: FastAPI, ctx: RouterContext) -> None:
    @app.get("/health")
    async def health() -> Response:
        # NOTE: 200 with zero replicas: a router scaled to zero engines must stay in its Service
        # (and not be restarted) to hold the requests that bring the engines back.
        healthy = len(ctx.replica_set.healthy())
        body = {
            "status": "ok",
            "healthy_replicas": healthy,
            "held_requests": len(ctx.hold),
            "held_body_bytes": ctx.hold.held_bytes,
            "buffered_body_bytes": ctx.body_budget.used_bytes,
        }
        return JSONResponse(body)

    @app.get("/router/demand")
    async def demand() -> dict[str, Any]:
        """What the operator's autoscaler reads (counts and per-replica load; no request data)."""
        return _demand(ctx)

    @app.get("/metrics")
    async def metrics() -> Response:
        for r in ctx.replica_set.replicas.values():
            ctx.metrics.set_replica(
                r.url, r.healthy, r.kv_event_lag_s(), ctx.index.num_blocks(r.url)
            )
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def _generate(
    ctx: RouterContext, request: Request, model: type[ChatCompletionRequest | CompletionRequest]
) -> Response:
    arrival = time.perf_counter()
    ctx.demand.arrived()
    body = await _read_body(ctx, request)
    # NOTE: held as its raw bytes, parsed once released: a parsed request costs up to ten times
    # its body, and a held one may wait minutes (router/http/body_budget.py).
    await _hold_until_ready(ctx, request, len(body))
    body, decision, stream, plan = await _route(ctx, request, body, model)
    return await ctx.proxy.forward(request, body, decision, stream, arrival, plan)


async def _route(
    ctx: RouterContext,
    request: Request,
    body: bytes,
    model: type[ChatCompletionRequest | CompletionRequest],
) -> tuple[bytes, Decision, bool, ResumePlan | None]:
    """The body to forward, the decision where to, whether it streams, and the plan to resume
    its stream; the parsed request ends here, before the request is forwarded."""
    tenant = tenant_tag(request.headers) if salts_by_tenant(ctx.config) else None
    parsed = await ctx.parser.parse_and_hash(body, model, tenant)
    session_key = request.headers.get(ctx.config.session_header) or (
        parsed.request.user if parsed.request else None
    )
    decision = await _decide(ctx, parsed.blocks, session_key, parsed.model)
    if parsed.blocks is not None and decision.lora_name is None:
        # NOTE: warm start sends the base model only: an adapter's prefixes are not recorded.
        ctx.hot.record(parsed.blocks.token_ids, cache_salt=parsed.blocks.cache_salt)
    stream = bool(parsed.request and parsed.request.stream)
    # A resumable stream goes with its plan's body: the same bytes it keeps to resume with.
    forwarded = parsed.plan.body() if parsed.plan is not None else parsed.body
    return forwarded, decision, stream, parsed.plan


async def _decide(
    ctx: RouterContext,
    blocks: PromptBlocks | None,
    session_key: str | None,
    model: str | None = None,
) -> Decision:
    try:
        return await ctx.dispatcher.decide_fresh(blocks, session_key, model=model)
    except ModelNotServed as e:
        raise APIError(404, str(e), param="model", code="model_not_found") from e
    except NoReplicaError as e:
        raise APIError(503, str(e), code="no_healthy_replica", headers={"Retry-After": "1"}) from e


async def _hold_until_ready(ctx: RouterContext, request: Request, body_bytes: int = 0) -> None:
    """Wait in the hold queue while no replica is ready (a client that leaves, leaves it)."""
    if not len(ctx.hold) and ctx.replica_set.healthy():
        return  # the common case: no tasks to watch for a disconnect
    try:
        await until_disconnect(request, ctx.hold.wait_for_replica(body_bytes))
    except HoldRefused as e:
        raise APIError(503, str(e), code=e.code, headers={"Retry-After": _retry_after(ctx)}) from e


def _retry_after(ctx: RouterContext) -> str:
    """Seconds a refused client should wait: a cold start takes a while, a full queue drains."""
    return str(max(1, min(30, round(ctx.config.hold_timeout_s / 4))))


def _demand(ctx: RouterContext) -> dict[str, Any]:
    now = time.monotonic()
    oldest = ctx.hold.oldest_since
    replicas = [
        {
            "url": r.url,
            "healthy": r.healthy,
            "inflight": len(r.inflight),
            "prefix_hit_score": round(ctx.demand.prefix_hit_score(r.url, now), 1),
            "num_requests_running": running,
            "num_requests_waiting": waiting,
            "kv_cache_usage": r.load.kv_cache_usage,
        }
        for r in ctx.replica_set.replicas.values()
        for running, waiting in [r.reported_requests()]
    ]
    return demand_view(ctx.demand, len(ctx.hold), now - oldest if oldest else 0.0, replicas)


async def _read_body(ctx: RouterContext, request: Request) -> bytes:
    """The body, refused with a 413 as soon as it passes the limit, and a 503 as soon as it
    passes the router's body budget (by its Content-Length, before a byte of it is read): a
    chunked body has no length to check up front, so it is read as it streams in, never whole."""
    too_large = APIError(
        413, f"the request body is larger than {MAX_BODY_BYTES} bytes", code="request_too_large"
    )
    lease = lease_of(request.scope)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit():
        if int(length) > MAX_BODY_BYTES:
            raise too_large
        _take_budget(ctx, lease, int(length))
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise too_large
            _take_budget(ctx, lease, size)
            chunks.append(chunk)
    except ClientDisconnect as e:  # gone (or cut off by the read deadline): no traceback per client
        raise APIError(400, "the client disconnected before sending the whole body") from e
    return b"".join(chunks)


def _take_budget(ctx: RouterContext, lease: BodyLease, size: int) -> None:
    """`size` bytes of this request's body in the router's body budget, or its 503 at once."""
    if not lease.grow_to(size):
        raise APIError(
            503,
            ctx.body_budget.full_message(size),
            code="router_memory_full",
            headers={"Retry-After": _retry_after(ctx)},
        )


def _replica_view(ctx: RouterContext, url: str) -> dict[str, Any]:
    r = ctx.replica_set.replicas[url]
    return {
        "url": url,
        "healthy": r.healthy,
        "warming": r.warming,
        "instance_id": r.instance_id,
        "root_hash": None if r.root_hash is None else r.root_hash.hex(),
        "cached_blocks": ctx.index.num_blocks(url),
        "kv_synced": r.kv_synced,
        "kv_seq": r.kv_seq,
        "kv_error": r.kv_error,
        "kind": r.kind,
        "served_models": None if r.served_models is None else sorted(r.served_models.cards),
        "block_size": r.block_size,
        "kv_view": r.kv_view(),
        "inflight": len(r.inflight),
        "queued_tokens": r.queued_tokens(ctx.config),
        "load": json.loads(json.dumps(r.load.__dict__)),
    }
