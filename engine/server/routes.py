"""The route table: thin endpoints that hand each request to its handler."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from engine.kernels.cpu_kernels import cpu_kernel_path
from engine.server.drain import drain_report
from engine.server.embeddings.create import create_embedding
from engine.server.kv_events.event_sources import kv_event_sources, server_info
from engine.server.kv_events.ndjson_stream import KVEventResponse
from engine.server.large_body_route import large_body_route
from engine.server.openai.chat import create_chat_completion
from engine.server.openai.completions import create_completion
from engine.server.openai.context import ServerContext
from engine.server.openai.guards import admitting_guard, require_trusted_continuation
from engine.server.openai.lora_adapters import load_lora_adapter, unload_lora_adapter
from engine.server.openai.prompt_work import in_prompt_pool
from engine.server.openai.render import render_chat_request, render_completion_request
from engine.server.openai.tokenize import detokenize, tokenize
from engine.server.responses.create import create_response
from engine.server.responses.stored import (
    delete_response,
    list_input_items,
    retrieve_response,
)
from engine.server.tenancy.tenant_resolver import tenant_guard, tenant_of
from engine.startup_stages import STARTUP_STAGES
from pagedock.http.auth import api_key_guard
from pagedock.http.errors import APIError
from pagedock.http.internal_key import internal_key_guard
from pagedock.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    EmbeddingRequest,
    EmbeddingResponse,
    ErrorResponse,
    LoadLoRAAdapterRequest,
    ModelCard,
    ModelList,
    TokenizeRequest,
    TokenizeResponse,
    UnloadLoRAAdapterRequest,
    VersionResponse,
)
from pagedock.protocol.render import RenderedRequest
from pagedock.protocol.response_items import InputItemList
from pagedock.protocol.responses import DeletedResponse, ResponsesRequest, ResponsesResponse

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)
}
# NOTE: tools read an event-stream schema per event ({"data": ..., "event": ...}, as schemathesis
# does) or for the whole body (a string), so it describes the events without constraining either.
_SSE_EVENTS = {
    "description": "Server-sent events: one `data: <JSON chunk>` line per event, then "
    "`data: [DONE]`; a failure mid-stream is an event whose data is an OpenAI error object.",
}
_SSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": _SSE_EVENTS}}}
}
_RESPONSE_EVENTS: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {
            "text/event-stream": {
                "schema": {
                    "description": "Server-sent events (`stream: true`): `event: <type>` and "
                    "`data: <JSON event>` per event, response.created first and "
                    "response.completed, .incomplete or .failed last; no [DONE]."
                }
            }
        }
    }
}


def api_routes(ctx: ServerContext) -> APIRouter:
    """Routes for clients, that new work is refused on while draining: behind the API key (when
    one is set), or with a tenants file behind a tenant's key (tenancy/tenant_resolver.py)."""
    guards = [Depends(tenant_guard(ctx.tenants)), Depends(admitting_guard(ctx))]
    if ctx.tenants.table is None:
        guards.insert(0, Depends(api_key_guard(ctx.options.api_key)))
    router = APIRouter(dependencies=guards, route_class=large_body_route(ctx.validation_process))

    @router.post(
        "/v1/chat/completions", response_model=ChatCompletionResponse, responses={**_ERRORS, **_SSE}
    )
    async def chat_completions(body: ChatCompletionRequest, raw_request: Request) -> Response:
        require_trusted_continuation(ctx, body, raw_request)
        return await create_chat_completion(ctx, body, raw_request)

    @router.post(
        "/v1/completions", response_model=CompletionResponse, responses={**_ERRORS, **_SSE}
    )
    async def completions(body: CompletionRequest, raw_request: Request) -> Response:
        require_trusted_continuation(ctx, body, raw_request)
        return await create_completion(ctx, body, raw_request)

    @router.post("/v1/embeddings", response_model=EmbeddingResponse, responses=_ERRORS)
    async def embeddings(body: EmbeddingRequest, raw_request: Request) -> Response:
        return await create_embedding(ctx, body, raw_request)

    @router.get("/v1/models", response_model=ModelList, responses=_ERRORS)
    async def models() -> ModelList:
        return model_list(ctx)

    @router.post("/tokenize", response_model=TokenizeResponse, responses=_ERRORS)
    async def tokenize_route(body: TokenizeRequest) -> TokenizeResponse:
        return await in_prompt_pool(ctx, tokenize, ctx, body)

    _add_render_routes(router, ctx)
    _add_responses_routes(router, ctx)

    @router.post("/detokenize", response_model=DetokenizeResponse, responses=_ERRORS)
    async def detokenize_route(body: DetokenizeRequest) -> DetokenizeResponse:
        return detokenize(ctx, body)

    return router


def kv_event_routes(ctx: ServerContext) -> APIRouter:
    """The routers' KV event stream: behind the internal key when one is set (else the API key),
    new streams refused while draining and beyond --max-kv-event-subscribers."""
    key = ctx.options.internal_api_key
    auth = internal_key_guard(key) if key else api_key_guard(ctx.options.api_key)
    router = APIRouter(dependencies=[Depends(auth), Depends(admitting_guard(ctx))])

    @router.get(
        "/v1/kv/events",
        responses={
            200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
            **_ERRORS,
        },
    )
    async def kv_events() -> StreamingResponse:
        consumer = ctx.kv_hub.subscribe()
        if consumer is None:
            raise APIError(
                503,
                f"{ctx.kv_hub.max_consumers} KV event streams are open already "
                "(--max-kv-event-subscribers); retry shortly",
                code="too_many_kv_event_subscribers",
                headers={"Retry-After": "1", "Connection": "close"},
            )
        return KVEventResponse(ctx.kv_hub, consumer)

    _add_event_source_routes(router, ctx)
    return router


def _add_event_source_routes(router: APIRouter, ctx: ServerContext) -> None:
    """Where vLLM's consumers find this engine's ZMQ events (kv_events/event_sources.py)."""

    @router.get("/get_server_info", responses=_ERRORS)
    async def get_server_info() -> JSONResponse:
        block_size = ctx.engine.engine.config.block_size
        info = server_info(
            ctx.served_model_name, ctx.model_root, ctx.kv_hub.instance_id, block_size
        )
        return JSONResponse(info)

    @router.get("/kv_event_sources", responses=_ERRORS)
    async def get_kv_event_sources(raw_request: Request) -> JSONResponse:
        local = raw_request.scope.get("server") or ("127.0.0.1", 0)
        return JSONResponse(kv_event_sources(ctx.kv_publisher, str(local[0])))


def _add_render_routes(router: APIRouter, ctx: ServerContext) -> None:
    """vLLM's render endpoints: token ids without running the model (for endpoint pickers)."""

    @router.post("/v1/chat/completions/render", response_model=RenderedRequest, responses=_ERRORS)
    async def render_chat(body: ChatCompletionRequest, raw_request: Request) -> RenderedRequest:
        require_trusted_continuation(ctx, body, raw_request)
        return await in_prompt_pool(ctx, render_chat_request, ctx, body)

    @router.post("/v1/completions/render", response_model=list[RenderedRequest], responses=_ERRORS)
    async def render_completion(
        body: CompletionRequest, raw_request: Request
    ) -> list[RenderedRequest]:
        require_trusted_continuation(ctx, body, raw_request)
        return await in_prompt_pool(ctx, render_completion_request, ctx, body)


def _add_responses_routes(router: APIRouter, ctx: ServerContext) -> None:
    """OpenAI's Responses API (docs/responses.md); stored responses are their tenant's only."""

    @router.post(
        "/v1/responses", response_model=ResponsesResponse, responses={**_ERRORS, **_RESPONSE_EVENTS}
    )
    async def responses(body: ResponsesRequest, raw_request: Request) -> Response:
        return await create_response(ctx, body, raw_request)

    @router.get("/v1/responses/{response_id}", response_model=ResponsesResponse, responses=_ERRORS)
    async def get_response(response_id: str, raw_request: Request) -> Response:
        return await retrieve_response(ctx, tenant_of(raw_request).name, response_id)

    @router.delete("/v1/responses/{response_id}", response_model=DeletedResponse, responses=_ERRORS)
    async def delete_response_route(response_id: str, raw_request: Request) -> DeletedResponse:
        return await delete_response(ctx, tenant_of(raw_request).name, response_id)

    @router.get(
        "/v1/responses/{response_id}/input_items",
        response_model=InputItemList,
        responses=_ERRORS,
    )
    async def input_items(
        response_id: str,
        raw_request: Request,
        order: Literal["asc", "desc"] = "desc",
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        after: str | None = None,
    ) -> InputItemList:
        tenant = tenant_of(raw_request).name
        return await list_input_items(ctx, tenant, response_id, order, limit, after)


def model_list(ctx: ServerContext) -> ModelList:
    """The base model, then each LoRA adapter as a model of its own (vLLM's cards: `parent` the
    base model's id, `root` the path it was loaded from; and where its requests' block hashes
    chain from, for a router's prefix affinity)."""
    base = ModelCard(id=ctx.served_model_name, root=ctx.model_root, max_model_len=ctx.max_model_len)
    adapters = [
        ModelCard(
            id=a.name,
            root=a.path,
            parent=ctx.served_model_name,
            max_model_len=ctx.max_model_len,
            kv_root_hash=a.kv_root or None,
        )
        for a in ctx.loras.adapters()
    ]
    return ModelList(data=[base, *adapters])


def lora_routes(ctx: ServerContext) -> APIRouter:
    """vLLM's runtime adapter updates, behind the API key; only with
    --allow-runtime-lora-updating (build_app decides)."""
    guards = [Depends(api_key_guard(ctx.options.api_key)), Depends(admitting_guard(ctx))]
    router = APIRouter(dependencies=guards)
    text = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **_ERRORS}

    @router.post("/v1/load_lora_adapter", response_class=PlainTextResponse, responses=text)
    async def load_lora(body: LoadLoRAAdapterRequest) -> PlainTextResponse:
        return await load_lora_adapter(ctx, body)

    @router.post("/v1/unload_lora_adapter", response_class=PlainTextResponse, responses=text)
    async def unload_lora(body: UnloadLoRAAdapterRequest) -> PlainTextResponse:
        return await unload_lora_adapter(ctx, body)

    return router


def open_routes(ctx: ServerContext) -> APIRouter:
    """Routes that need no API key: probes, scrapes (/metrics, /startup, /drain), the version."""
    router = APIRouter()

    @router.get(
        "/health",
        responses={
            200: {"description": "the engine loop is alive"},
            503: {"description": "draining, the engine loop died, or a step has hung"},
        },
    )
    async def health() -> Response:
        if ctx.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        if not ctx.engine.is_alive:
            return JSONResponse({"status": "engine dead"}, status_code=503)
        stalled_s = ctx.engine.seconds_since_progress
        if 0 < ctx.options.stall_timeout_s < stalled_s:
            body = {"status": "engine stalled", "seconds_since_progress": round(stalled_s, 1)}
            return JSONResponse(body, status_code=503)
        # root_hash: the weights' identity (engine/runtime/weights_identity.py), for routers
        # that must not resume a stream on other weights before they read a KV snapshot.
        body = {"status": "ok", "seconds_since_progress": round(stalled_s, 2)}
        return JSONResponse({**body, "root_hash": ctx.kv_hub.root_hash})

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    _add_report_routes(router, ctx)

    @router.get("/version", response_model=VersionResponse)
    async def version_route() -> VersionResponse:
        return VersionResponse(version=_version(), cpu_kernels=cpu_kernel_path())

    return router


def _add_report_routes(router: APIRouter, ctx: ServerContext) -> None:
    """What the operator reads from each engine pod: its cold start and its drain's sizing."""

    @router.get(
        "/startup",
        responses={200: {"description": "seconds from the process's start to each stage"}},
    )
    async def startup() -> JSONResponse:
        """When this process reached each start-up stage (engine/startup_stages.py)."""
        return JSONResponse(STARTUP_STAGES.report())

    @router.get(
        "/drain",
        responses={200: {"description": "the drain deadline and the recent requests' durations"}},
    )
    async def drain_route() -> JSONResponse:
        """What a termination grace period is sized against (engine/server/drain.py)."""
        return JSONResponse(drain_report(ctx))


def _version() -> str:
    try:
        return version("pagedock")
    except PackageNotFoundError:
        return "unknown"
