"""generate: one chat, completions, Responses API or embeddings request through the router.

tenant      who it belongs to (router/flow/tenant_resolver.py; 401 if nobody)
body        read within the body budget (413, 503 router_memory_full)
hold        wait while no replica is ready (503 past the hold queue's limits)
parse       the request as the engine reads it, its prompt's blocks, its tenant's cache_salt
            and priority
admit       the tenant's quota, then a flow slot (429s; router/flow/admission.py)
route       the replica(s) to try, by the policy; a Responses API follow-up first to the replica
            that produced the response it continues, when known (reason `conversation`)
forward     to them, with failover; the answer carries the tenant's x-ratelimit-* headers (and,
            for a response, its id is learnt as it passes: router/http/response_ids.py)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from pagedock.http.errors import APIError
from pagedock.limits import MAX_BODY_BYTES  # the engine's default --max-body-bytes too
from pagedock.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from pagedock.protocol.responses import ResponsesRequest
from pagedock.tenancy.tenants import Tenant
from router.flow.admission import Admission, admit
from router.http.body_budget import BodyLease, lease_of
from router.http.hold_queue import HoldRefused
from router.http.proxy import REPLICA_HEADER, until_disconnect
from router.http.request_parser import Parsed
from router.http.response_ids import learn_response_id
from router.http.route_trace import RouteTrace, trace_of
from router.http.tenant_salt import salts_by_tenant, tenant_tag
from router.kv.prompt_hasher import PromptBlocks
from router.policies.dispatcher import Decision, ModelNotServed, NoReplicaError
from router.server.context import RouterContext

GenerationModel = type[
    ChatCompletionRequest | CompletionRequest | ResponsesRequest | EmbeddingRequest
]
# A prompt the router could not tokenize is counted at about four bytes a token.
BYTES_PER_TOKEN_ESTIMATE = 4


async def generate(ctx: RouterContext, request: Request, model: GenerationModel) -> Response:
    arrival = time.perf_counter()
    ctx.demand.arrived()
    tenant = ctx.tenants.resolve(request.headers)
    return await in_trace(
        ctx, request, tenant, lambda: _generate(ctx, request, model, tenant, arrival)
    )


async def in_trace(
    ctx: RouterContext,
    request: Request,
    tenant: Tenant,
    handle: Callable[[], Awaitable[Response]],
) -> Response:
    """`handle()`'s answer, in a trace of its own when tracing is on (router/http/route_trace.py):
    the trace ends with the answer's last byte, or with the error the request ended with."""
    if ctx.tracing is None:
        return await handle()
    trace = request.state.trace = RouteTrace(ctx.tracing.tracer, request, tenant.name)
    try:
        response = await handle()
    except APIError as e:
        trace.end(e.status_code, e.message)
        raise
    except BaseException as e:
        trace.end(499 if isinstance(e, ClientDisconnect) else 500, type(e).__name__)
        raise
    return traced(response, trace)


async def _generate(
    ctx: RouterContext, request: Request, model: GenerationModel, tenant: Tenant, arrival: float
) -> Response:
    body = await _read_body(ctx, request)
    # NOTE: held as its raw bytes, parsed once released: a parsed request costs up to ten times
    # its body, and a held one may wait minutes (router/http/body_budget.py).
    await hold_until_ready(ctx, request, len(body))
    parsed = await _parse(ctx, request, body, model, tenant)
    if ctx.tenants.table is not None and parsed.request is not None:
        # Named to the engines (their fair queues, their metrics) with the internal key: only
        # for a body the router parsed, so never with a continuation (the parser refuses one).
        request.state.tenant = tenant.name
    admission = await _admit(ctx, request, tenant, parsed, len(body))
    trace = trace_of(request)
    if trace is not None:
        trace.waited(admission.ticket.waited_s)
    try:
        session_key = _session_key(ctx, request, parsed)
        conversation = _conversation_replica(ctx, tenant, parsed)
        started_ns = time.time_ns()
        decision = await decide(ctx, parsed.blocks, session_key, parsed.model, conversation)
        if trace is not None:
            trace.routed(decision, started_ns)
        if parsed.blocks is not None and decision.lora_name is None:
            # NOTE: warm start sends the base model only: an adapter's prefixes are not recorded.
            ctx.hot.record(parsed.blocks.token_ids, cache_salt=parsed.blocks.cache_salt)
        stream = bool(getattr(parsed.request, "stream", False))  # (embeddings never stream)
        # A resumable stream goes with its plan's body: the same bytes it keeps to resume with.
        forwarded = parsed.plan.body() if parsed.plan is not None else parsed.body
        response = await ctx.proxy.forward(
            request, forwarded, decision, stream, arrival, parsed.plan
        )
    except BaseException:
        admission.finish(0)
        raise
    if isinstance(parsed.request, ResponsesRequest):
        response = _learn_owner(ctx, tenant, response)
    return admission.attach(response)


def traced(response: Response, trace: RouteTrace) -> Response:
    """`response`, whose trace ends with its last byte (a stream's, once relayed)."""
    if not isinstance(response, StreamingResponse):
        trace.end(response.status_code)
        return response
    chunks = response.body_iterator

    async def relayed() -> AsyncIterator[Any]:
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            trace.end(response.status_code)

    response.body_iterator = relayed()
    return response


def _conversation_replica(ctx: RouterContext, tenant: Tenant, parsed: Parsed) -> str | None:
    """The replica that produced the response a Responses API follow-up continues, if known: a
    routing hint (the engine decides whether the tenant may continue it)."""
    body = parsed.request
    if not isinstance(body, ResponsesRequest) or body.previous_response_id is None:
        return None
    return ctx.response_owners.owner(tenant.name, body.previous_response_id)


def _learn_owner(ctx: RouterContext, tenant: Tenant, response: Response) -> Response:
    """`response`, whose response id is remembered as made by the replica that answered."""
    replica = response.headers.get(REPLICA_HEADER)
    if replica is None:
        return response
    return learn_response_id(
        response, lambda response_id: ctx.response_owners.learn(tenant.name, response_id, replica)
    )


async def _parse(
    ctx: RouterContext, request: Request, body: bytes, model: GenerationModel, tenant: Tenant
) -> Parsed:
    """The parsed request, forwarded with its tenant's salt and priority."""
    tag, owner = None, tenant if ctx.tenants.table is not None else None
    if salts_by_tenant(ctx.config):
        tag = tenant_tag(request.headers, None if owner is None else owner.name)
    return await ctx.parser.parse_and_hash(body, model, tag, owner)


async def _admit(
    ctx: RouterContext, request: Request, tenant: Tenant, parsed: Parsed, body_bytes: int
) -> Admission:
    """Quota and flow slot, waiting for the slot while the client stays."""
    if parsed.blocks is not None:
        prompt_tokens = parsed.blocks.num_prompt_tokens
    else:
        prompt_tokens = body_bytes // BYTES_PER_TOKEN_ESTIMATE
    priority = parsed.request.priority if parsed.request is not None else tenant.priority
    work = admit(tenant, priority, prompt_tokens, ctx.quotas, ctx.flow, ctx.flow_metrics)
    if not ctx.flow.limited:
        return await work  # nothing waits: no disconnect watch needed
    return await until_disconnect(request, work)


def _session_key(ctx: RouterContext, request: Request, parsed: Parsed) -> str | None:
    return request.headers.get(ctx.config.session_header) or (
        parsed.request.user if parsed.request else None
    )


async def decide(
    ctx: RouterContext,
    blocks: PromptBlocks | None,
    session_key: str | None,
    model: str | None = None,
    prefer: str | None = None,
) -> Decision:
    """The dispatcher's decision (`prefer`: a conversation's replica), its errors as the
    client's."""
    try:
        return await ctx.dispatcher.decide_fresh(blocks, session_key, model=model, prefer=prefer)
    except ModelNotServed as e:
        raise APIError(404, str(e), param="model", code="model_not_found") from e
    except NoReplicaError as e:
        raise APIError(503, str(e), code="no_healthy_replica", headers={"Retry-After": "1"}) from e


async def hold_until_ready(ctx: RouterContext, request: Request, body_bytes: int = 0) -> None:
    """Wait in the hold queue while no replica is ready (a client that leaves, leaves it)."""
    if not len(ctx.hold) and ctx.replica_set.healthy():
        return  # the common case: no tasks to watch for a disconnect
    try:
        await until_disconnect(request, ctx.hold.wait_for_replica(body_bytes))
    except HoldRefused as e:
        raise APIError(503, str(e), code=e.code, headers={"Retry-After": retry_after(ctx)}) from e


def retry_after(ctx: RouterContext) -> str:
    """Seconds a refused client should wait: a cold start takes a while, a full queue drains."""
    return str(max(1, min(30, round(ctx.config.hold_timeout_s / 4))))


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
            headers={"Retry-After": retry_after(ctx)},
        )
