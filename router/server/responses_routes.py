"""OpenAI's Responses API through the router (docs/responses.md, docs/router.md).

    POST /v1/responses                        a generation, as chat goes (router/server/
                                              generation.py): a first turn by the policy (its
                                              prompt hashed as a chat's), a follow-up to the
                                              replica that produced its previous response
    GET, DELETE /v1/responses/{id}            to the replica that produced `id` when the router
    GET /v1/responses/{id}/input_items        knows it and it is ready, else to any ready replica

A stored response lives in the engines' store: in one engine with `--responses-store memory`, so
a read routed elsewhere (the router restarted, or never saw the id) is that engine's 404; in Redis,
shared, so any engine answers. The router's map of ids is a routing hint, never an authorization:
each engine answers for the request's tenant only, and the router names the tenant to the
engines as it does for chat. Reads are neither admitted nor quota-charged: they queue for no
engine's compute (the hold queue and failover apply). Each is traced as a generation is, with
its routing (reason `conversation` when the owner was known) and its upstream attempts.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request, Response

from pagedock.protocol.responses import ResponsesRequest
from router.http.route_trace import trace_of
from router.server.context import RouterContext
from router.server.generation import decide, generate, hold_until_ready, in_trace


def add_responses_routes(app: FastAPI, ctx: RouterContext) -> None:
    @app.post("/v1/responses")
    async def create(request: Request) -> Response:
        return await generate(ctx, request, ResponsesRequest)

    @app.get("/v1/responses/{response_id}")
    async def retrieve(request: Request, response_id: str) -> Response:
        return await stored_response(ctx, request, response_id)

    @app.delete("/v1/responses/{response_id}")
    async def delete(request: Request, response_id: str) -> Response:
        return await stored_response(ctx, request, response_id)

    @app.get("/v1/responses/{response_id}/input_items")
    async def input_items(request: Request, response_id: str) -> Response:
        return await stored_response(ctx, request, response_id)


async def stored_response(ctx: RouterContext, request: Request, response_id: str) -> Response:
    """A read or delete of a stored response, on the replica that produced it when known (its
    query string goes along)."""
    arrival = time.perf_counter()
    ctx.demand.arrived()
    tenant = ctx.tenants.resolve(request.headers)  # the API key, or a tenant's (else the 401)
    if ctx.tenants.table is not None:
        request.state.tenant = tenant.name  # the engine's store is per tenant

    async def forward() -> Response:
        await hold_until_ready(ctx, request)
        owner = ctx.response_owners.owner(tenant.name, response_id)
        started_ns = time.time_ns()
        decision = await decide(ctx, None, None, None, owner)
        trace = trace_of(request)
        if trace is not None:
            trace.routed(decision, started_ns)
        response = await ctx.proxy.forward(request, b"", decision, False, arrival)
        if request.method == "DELETE" and response.status_code == 200:
            ctx.response_owners.forget(tenant.name, response_id)
        return response

    return await in_trace(ctx, request, tenant, forward)
