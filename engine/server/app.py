"""build_app: the FastAPI application around one AsyncEngine."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from engine.server.body_limit import BodyLimitMiddleware
from engine.server.openai.context import ServerContext
from engine.server.openai.errors import install_error_handlers
from engine.server.routes import api_routes, kv_event_routes, lora_routes, open_routes
from pagedock.http.auth import docs_urls
from pagedock.http.request_context import RequestContextMiddleware

logger = logging.getLogger("pagedock.server")


def build_app(ctx: ServerContext) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctx.engine.start()  # the engine thread needs the running loop to post results to
        logger.info("engine loop started; serving %s", ctx.served_model_name)
        try:
            yield
        finally:
            ctx.kv_hub.close_all()
            if ctx.kv_publisher is not None:
                ctx.kv_publisher.close()
            ctx.prompt_pool.shutdown(wait=False, cancel_futures=True)
            ctx.validation_process.close()
            await ctx.responses_store.close()
            await ctx.quotas.close()
            await ctx.engine.shutdown()
            if ctx.tracing is not None:
                ctx.tracing.shutdown()  # the last requests' spans go out

    app = FastAPI(
        title="pagedock",
        summary="OpenAI-compatible LLM inference server (paged KV cache, continuous batching)",
        version="1",
        lifespan=lifespan,
        **docs_urls(_client_key(ctx)),
    )
    install_error_handlers(app)
    app.include_router(api_routes(ctx))
    app.include_router(kv_event_routes(ctx))
    if ctx.allow_runtime_lora_updating:
        app.include_router(lora_routes(ctx))
    app.include_router(open_routes(ctx))
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=ctx.options.max_body_bytes)
    app.add_middleware(RequestContextMiddleware)  # outermost: every line of a request has its ids
    app.state.ctx = ctx
    return app


def _client_key(ctx: ServerContext) -> str | None:
    """What docs_urls is told clients need: with a tenants file, a tenant's key (the schema and
    docs pages, which map the API, are closed then as behind --api-key)."""
    return ctx.options.api_key or ("a tenant's key" if ctx.tenants.table is not None else None)
