"""EndpointPicker: the router as the Gateway API Inference Extension's endpoint picker (EPP).

One ext_proc stream per HTTP request. The picker reads the request headers, then the body, asks
the router's dispatcher (the same cost model and policy as `pagedock route`) and tells the data
plane where to send the request; it never proxies the request itself.

    full-duplex streamed body (the protocol's mode; the default when Envoy does not say):
      headers ........................ held (the destination is not known yet)
      body frames .................... collected until end_of_stream (or trailers)
      -> headers response (destination header, clear_route_cache) + dynamic metadata,
         then the body handed back unchanged, in pieces
    buffered body:
      headers -> continue;  body (whole) -> body response with the destination
    no body / streamed / buffered-partial body:
      headers -> headers response with the destination, picked by load (no prompt to hash)
    response headers: the endpoint that served (`envoy.lb` metadata) takes the request's
      in-flight accounting; response body frames pass through; the stream's end releases it.

A Responses API follow-up (`previous_response_id`) is sent first to the replica that made the
response it continues, as `pagedock route` sends it (reason `conversation`): the picker learns
each response's id from the answer's body frames as they pass (so only when the gateway sends
them: a response body mode other than NONE), keyed by a digest of the client's credential.

No eligible endpoint (none healthy, or none in the subset hint) is an immediate 503, a model
(a LoRA adapter) that no replica serves an immediate 404 `model_not_found`; a request whose best
estimated time to first token exceeds --picker-shed-ttft-ms an immediate 429. The bodies it
collects count in the router's body budget (router/http/body_budget.py) until they are answered:
one past it is an immediate 503 `router_memory_full`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf.struct_pb2 import Struct
from starlette.datastructures import Headers

from pagedock.http.errors import error_json
from pagedock.limits import MAX_BODY_BYTES
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.protocol.embeddings import EmbeddingRequest
from pagedock.protocol.responses import ResponsesRequest
from router.http.body_budget import BodyLease
from router.http.request_parser import ClientContinuation, GenerationRequest, Parsed
from router.http.response_ids import ResponseIdReader
from router.http.tenant_salt import tenant_tag
from router.picker import ext_proc
from router.policies import RouteRequest
from router.policies.dispatcher import Decision, ModelNotServed, NoReplicaError
from router.policies.prefix_aware import estimated_ttft_ms
from router.replicas.replica import Replica

if TYPE_CHECKING:
    from router.server.context import RouterContext

logger = logging.getLogger("pagedock.router.picker")
BODY_MODELS: dict[str, type[GenerationRequest]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest,
    "/v1/embeddings": EmbeddingRequest,
}


class Refusal(Exception):
    """The request goes to no endpoint: the client gets this status at once."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    def response(self) -> pb.ProcessingResponse:
        headers = {"content-type": "application/json"}
        if self.status in (429, 503):
            headers["retry-after"] = "1"
        body = error_json(self.status, self.message, code=self.code)
        return ext_proc.immediate(self.status, body, headers, f"pagedock_{self.code}")


def _forget_body(stream: RequestStream) -> None:
    """The body is answered (handed back, or Envoy's to send on): the picker keeps none of it."""
    stream.body.clear()
    if stream.lease is not None:
        stream.lease.release()


def endpoint_of(url: str) -> str:
    """A replica's `ip:port` as the data plane names it (`[ip]:port` for IPv6)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def subset_filter(subset: list[str]) -> Callable[[Replica], bool]:
    """Replicas whose `ip:port` is in the hint; a bare address admits every port of it."""
    wanted = set(subset)
    return lambda r: endpoint_of(r.url) in wanted or (urlsplit(r.url).hostname or "") in wanted


@dataclass
class Pick:
    decision: Decision
    replica: Replica
    """The replica the request is counted on (the primary until the data plane says otherwise)."""


@dataclass
class RequestStream:
    """What one ext_proc stream (one HTTP request) has told the picker so far."""

    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    headers: dict[str, str] = field(default_factory=dict)
    subset: list[str] | None = None
    request_mode: int = ext_proc.FULL_DUPLEX
    response_mode: int | None = None
    body: bytearray = field(default_factory=bytearray)
    pick: Pick | None = None
    finished: bool = False
    """An immediate response was sent: Envoy ends the stream."""
    lease: BodyLease | None = None
    """The body's share of the router's body budget, given back when the stream ends."""
    response_id: ResponseIdReader | None = None
    """A Responses API request's: reads the id of the response made, to learn its owner."""


class EndpointPicker(pb_grpc.ExternalProcessorServicer):
    def __init__(self, ctx: RouterContext) -> None:
        self.ctx = ctx

    async def Process(
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ProcessingResponse]:
        """One HTTP request's ext_proc stream (the gRPC method, hence its name)."""
        stream = RequestStream(lease=self.ctx.body_budget.lease())
        try:
            async for request in request_iterator:
                try:
                    for response in await self._handle(stream, request):
                        yield response
                except Refusal as refusal:
                    logger.info("picker: %s %s", refusal.status, refusal.message)
                    stream.finished = True
                    yield refusal.response()
                if stream.finished:
                    return
        finally:
            if stream.pick is not None:
                stream.pick.replica.end(stream.request_id)
            if stream.lease is not None:
                stream.lease.release()

    async def _handle(
        self, stream: RequestStream, request: pb.ProcessingRequest
    ) -> list[pb.ProcessingResponse]:
        kind = request.WhichOneof("request")
        if kind == "request_headers":
            return await self._request_headers(stream, request)
        if kind == "request_body":
            return await self._request_body(stream, request.request_body)
        if kind == "request_trailers":
            responses = (
                await self._end_of_body(stream, trailers=True) if stream.pick is None else []
            )
            return [*responses, pb.ProcessingResponse(request_trailers=pb.TrailersResponse())]
        if kind == "response_headers":
            self._served(stream, ext_proc.served_endpoint(request))
            return [pb.ProcessingResponse(response_headers=pb.HeadersResponse())]
        if kind == "response_body":
            body = request.response_body
            self._learn_owner(stream, body)
            if stream.response_mode == ext_proc.FULL_DUPLEX:
                return [ext_proc.response_body_piece(body.body, body.end_of_stream)]
            return [pb.ProcessingResponse(response_body=pb.BodyResponse())]
        if kind == "response_trailers":
            return [pb.ProcessingResponse(response_trailers=pb.TrailersResponse())]
        return []

    async def _request_headers(
        self, stream: RequestStream, request: pb.ProcessingRequest
    ) -> list[pb.ProcessingResponse]:
        stream.headers = ext_proc.header_map(request.request_headers)
        stream.subset = ext_proc.subset_hint(request)
        mode = ext_proc.request_body_mode(request)
        stream.request_mode = stream.request_mode if mode is None else mode
        stream.response_mode = ext_proc.response_body_mode(request)
        if request.request_headers.end_of_stream or stream.request_mode not in (
            ext_proc.FULL_DUPLEX,
            ext_proc.BUFFERED,
        ):
            # No body will come before the headers must be answered: pick by load alone.
            return [ext_proc.headers_response(*await self._pick(stream, b""))]
        if stream.request_mode == ext_proc.BUFFERED:
            return [ext_proc.headers_response()]  # continue; the whole body comes next
        return []  # full duplex: the headers wait for the body

    async def _request_body(
        self, stream: RequestStream, body: pb.HttpBody
    ) -> list[pb.ProcessingResponse]:
        if stream.pick is not None:  # picked from the headers: frames pass on as they are
            if stream.request_mode == ext_proc.FULL_DUPLEX:
                return [ext_proc.request_body_piece(body.body, body.end_of_stream)]
            return [ext_proc.body_response()]
        size = len(stream.body) + len(body.body)
        if size > MAX_BODY_BYTES:
            raise Refusal(
                413, f"the request body is larger than {MAX_BODY_BYTES} bytes", "request_too_large"
            )
        if stream.lease is not None and not stream.lease.grow_to(size):
            budget = self.ctx.body_budget
            raise Refusal(503, budget.full_message(size), "router_memory_full")
        stream.body += body.body
        if not body.end_of_stream:
            return []
        return await self._end_of_body(stream, trailers=False)

    async def _end_of_body(
        self, stream: RequestStream, trailers: bool
    ) -> list[pb.ProcessingResponse]:
        common, metadata = await self._pick(stream, bytes(stream.body))
        if stream.request_mode == ext_proc.BUFFERED:
            _forget_body(stream)
            return [ext_proc.body_response(common, metadata)]
        body = list(_handed_back(bytes(stream.body), end_of_stream=not trailers))
        _forget_body(stream)
        return [ext_proc.headers_response(common, metadata), *body]

    async def _pick(self, stream: RequestStream, body: bytes) -> tuple[pb.CommonResponse, Struct]:
        decision = await self._decide(stream, body)
        config = self.ctx.config
        primary = decision.replicas[0]
        if config.picker_shed_ttft_ms > 0:
            self._shed_if_saturated(decision)
        cached_tokens = self.ctx.dispatcher.commit(decision, primary, stream.request_id)
        self.ctx.metrics.observe_decision(
            primary.url, decision.reason, cached_tokens, decision.lora_name
        )
        stream.pick = Pick(decision, primary)
        endpoints = [endpoint_of(r.url) for r in decision.replicas[: config.max_attempts]]
        return ext_proc.destination(endpoints)

    def _shed_if_saturated(self, decision: Decision) -> None:
        """429 when even the fastest eligible replica's estimated time to first token is over
        --picker-shed-ttft-ms (whichever the policy ranked first)."""
        config = self.ctx.config
        request = RouteRequest(decision.blocks.num_prompt_tokens if decision.blocks else 0)
        ttft_ms = min(estimated_ttft_ms(c, request, config) for c in decision.candidates.values())
        if ttft_ms > config.picker_shed_ttft_ms:
            raise Refusal(
                429,
                "every eligible replica is saturated (estimated time to first token "
                f"{ttft_ms:.0f} ms > {config.picker_shed_ttft_ms:g} ms)",
                "shed",
            )

    async def _decide(self, stream: RequestStream, body: bytes) -> Decision:
        if stream.subset is not None and not stream.subset:
            raise Refusal(503, "the data plane's endpoint subset is empty", "no_eligible_endpoint")
        # NOTE: by suffix: the picker sees the path before the route's rewrite (/llm/v1/...).
        path = stream.headers.get(":path", "").split("?", 1)[0].rstrip("/")
        model = next((m for suffix, m in BODY_MODELS.items() if path.endswith(suffix)), None)
        try:
            parsed = await self.ctx.parser.parse_and_hash(body, model) if model and body else None
        except ClientContinuation as e:
            raise Refusal(e.status_code, e.message, "continuation_not_allowed") from e
        request = parsed.request if parsed else None
        session_key = stream.headers.get(self.ctx.config.session_header) or (
            request.user if request else None
        )
        among = subset_filter(stream.subset) if stream.subset is not None else None
        try:
            return await self.ctx.dispatcher.decide_fresh(
                parsed.blocks if parsed else None,
                session_key,
                among,
                parsed.model if parsed else None,
                self._conversation(stream, parsed),
            )
        except ModelNotServed as e:
            raise Refusal(404, str(e), "model_not_found") from e
        except NoReplicaError as e:
            raise Refusal(503, str(e), "no_eligible_endpoint") from e

    def _conversation(self, stream: RequestStream, parsed: Parsed | None) -> str | None:
        """For a Responses API request: the replica that made the response it continues (when
        known), and a reader of the id of the response it makes (learnt once it passes)."""
        request = parsed.request if parsed else None
        if not isinstance(request, ResponsesRequest):
            return None
        stream.response_id = ResponseIdReader(bool(request.stream))
        previous = request.previous_response_id
        owners = self.ctx.response_owners
        return None if previous is None else owners.owner(_owner_key(stream), previous)

    def _learn_owner(self, stream: RequestStream, body: pb.HttpBody) -> None:
        reader, pick = stream.response_id, stream.pick
        if reader is None or pick is None:
            return
        found = reader.feed(body.body, body.end_of_stream)
        if found is not None:
            self.ctx.response_owners.learn(_owner_key(stream), found, pick.replica.url)

    def _served(self, stream: RequestStream, served: str | None) -> None:
        """The data plane fell back to another of the picked endpoints: count the request there."""
        pick = stream.pick
        if pick is None:
            return
        if served is not None and served != endpoint_of(pick.replica.url):
            fallback = next(
                (r for r in pick.decision.replicas if endpoint_of(r.url) == served), None
            )
            if fallback is not None:
                pick.replica.end(stream.request_id)
                self.ctx.dispatcher.commit(pick.decision, fallback, stream.request_id)
                pick.replica = fallback
        pick.replica.first_byte(stream.request_id)


def _owner_key(stream: RequestStream) -> str:
    """Whose conversations the stream's are: the client's credential, digested (the picker has
    no tenants of its own), so an id another client holds says nothing of where it lives."""
    return "credential:" + tenant_tag(Headers(stream.headers))


def _handed_back(body: bytes, end_of_stream: bool) -> Iterator[pb.ProcessingResponse]:
    pieces = list(ext_proc.streamed_body(body))
    if not end_of_stream:  # trailers end the request; the last body piece does not
        pieces[-1].request_body.response.body_mutation.streamed_response.end_of_stream = False
    return iter(pieces)
