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

from pagedock.http.auth import docs_urls
from pagedock.http.errors import install_api_error_handlers
from pagedock.http.request_context import RequestContextMiddleware
from pagedock.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from router.demand import demand_view
from router.http.body_budget import BodyLeases
from router.http.root_path import RootPathMiddleware
from router.replicas.served_models import merged_model_list
from router.server.context import RouterContext
from router.server.dashboard_routes import add_dashboard_routes
from router.server.generation import decide, generate, hold_until_ready
from router.server.responses_routes import add_responses_routes


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
    app.add_middleware(RequestContextMiddleware)  # outermost: every line of a request has its ids
    _add_api_routes(app, ctx)
    _add_open_routes(app, ctx)
    app.state.ctx = ctx
    return app


def _add_api_routes(app: FastAPI, ctx: RouterContext) -> None:
    async def require_client(request: Request) -> None:
        ctx.tenants.resolve(request.headers)  # the API key, or a tenant's (else the 401)

    guard = [Depends(require_client)]

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(ctx, request, ChatCompletionRequest)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(ctx, request, CompletionRequest)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        """By load alone: its prompt is not hashed (no prefix affinity to gain)."""
        return await generate(ctx, request, EmbeddingRequest)

    add_responses_routes(app, ctx)

    @app.get("/v1/models", dependencies=guard)
    async def models(request: Request) -> Response:
        """The fleet's models: every base model and the union of the LoRA adapters the ready
        replicas serve (forwarded to one replica until any has been read)."""
        ctx.demand.arrived()
        await hold_until_ready(ctx, request)
        known = [r.served_models for r in ctx.replica_set.healthy() if r.served_models]
        if known:
            return JSONResponse(merged_model_list(known))
        decision = await decide(ctx, None, None)
        return await ctx.proxy.forward(request, b"", decision, False, time.perf_counter())

    # Replica URLs and their state are for operators, not for keyless clients.
    @app.get("/router/replicas", dependencies=guard)
    async def replicas() -> dict[str, Any]:
        """What the router knows of each replica (for people and tests)."""
        return {
            "policy": ctx.config.policy,
            "replicas": [_replica_view(ctx, url) for url in sorted(ctx.replica_set.replicas)],
        }

    app.state.dashboard_feed = add_dashboard_routes(app, ctx, require_client)


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
            "flow_queued_requests": ctx.flow.waiting(),
        }
        return JSONResponse(body)

    @app.get("/router/demand")
    async def demand() -> dict[str, Any]:
        """What the operator's autoscaler reads (counts and per-replica load; no request data)."""
        return _demand(ctx)

    @app.get("/metrics")
    async def metrics() -> Response:
        ctx.flow_metrics.set_queued(ctx.flow.waiting())
        for r in ctx.replica_set.replicas.values():
            ctx.metrics.set_replica(
                r.url, r.healthy, r.kv_event_lag_s(), ctx.index.num_blocks(r.url)
            )
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)


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
    view = demand_view(ctx.demand, len(ctx.hold), now - oldest if oldest else 0.0, replicas)
    # Requests waiting for a slot (flow control): the autoscaler may scale on these too.
    view["num_flow_queued"] = ctx.flow.waiting()
    view["oldest_flow_queued_seconds"] = round(ctx.flow.oldest_wait_s(now), 3)
    return view


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
