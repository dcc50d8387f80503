"""The router's endpoint-picker mode, driven as Envoy's ext_proc filter drives it: a gRPC client
sends ProcessingRequest messages (request headers, then body frames, end_of_stream) on one stream
per HTTP request and reads the ProcessingResponses.

Written against the Gateway API Inference Extension's endpoint picker protocol v1.0.0
(docs/proposals/004-endpoint-picker-protocol, inference extension v1.6) and Envoy's
envoy.service.ext_proc.v3 API (the xds-protos package). The replicas are Replica records the
router knows, with KV blocks in its index, as a snapshot would have put them there: nothing is
proxied in this mode, so no replica process is needed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import json_format, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pagedock.kv.block_hash import hash_blocks, lora_root_hash
from router.kv.prompt_hasher import PromptHasher
from router.picker.ext_proc import BODY_CHUNK_BYTES
from router.picker.picker_server import start_picker, stop_picker
from router.replicas.discovery.static import StaticDiscovery
from router.replicas.replica import Replica
from router.replicas.served_models import ServedModels
from router.server.context import RouterContext
from tests.router.factories import make_config
from tests.router.live import free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
ROOT = b"\x01" * 32
BLOCK_SIZE = 16
A, B, C = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"
PROMPT = list(range(100, 164))  # four full blocks


class Picker:
    """The running picker and an Envoy-like client of it."""

    def __init__(self, ctx: RouterContext, channel: grpc.aio.Channel) -> None:
        self.ctx = ctx
        self.stub = pb_grpc.ExternalProcessorStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)

    def replica(self, endpoint: str) -> Replica:
        return self.ctx.replica_set.replicas[f"http://{endpoint}"]

    async def exchange(self, *requests: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        """Send the requests on one stream, then half-close; every response until the end."""

        async def messages() -> AsyncIterator[pb.ProcessingRequest]:
            for request in requests:
                yield request

        return [response async for response in self.stub.Process(messages())]


@pytest_asyncio.fixture()
async def picker() -> AsyncIterator[Picker]:
    config = make_config(
        replicas=[f"http://{e}" for e in (A, B, C)],
        host="127.0.0.1",
        picker_port=free_port(),
        block_size=BLOCK_SIZE,
    )
    ctx = RouterContext(config, PromptHasher(None), StaticDiscovery(config.replicas))
    for url in config.replicas:  # as discovery and a KV snapshot would leave them
        ctx.replica_set.replicas[url] = Replica(
            url, root_hash=ROOT, block_size=BLOCK_SIZE, kv_synced=True
        )
    server = await start_picker(ctx)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{config.picker_port}")
    try:
        yield Picker(ctx, channel)
    finally:
        await channel.close()
        await stop_picker(server)


def headers(
    path: str = "/v1/completions",
    end_of_stream: bool = False,
    subset: list[str] | str | None = None,
    mode: int | None = None,
    extra: dict[str, str] | None = None,
) -> pb.ProcessingRequest:
    fields = {":method": "POST", ":path": path, "content-type": "application/json", **(extra or {})}
    header_map = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in fields.items()]
    )
    request = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=header_map, end_of_stream=end_of_stream)
    )
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({"x-gateway-destination-endpoint-subset": subset})
        request.metadata_context.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
    if mode is not None:
        request.protocol_config.request_body_mode = mode  # type: ignore[assignment]
    return request


def body_frames(body: bytes, num_frames: int = 3) -> list[pb.ProcessingRequest]:
    """The body as Envoy streams it: several frames, the last one end_of_stream."""
    size = -(-len(body) // num_frames)
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return [
        pb.ProcessingRequest(request_body=pb.HttpBody(body=p, end_of_stream=i == len(pieces) - 1))
        for i, p in enumerate(pieces)
    ]


def completion(prompt: list[int] | str = PROMPT, **fields: Any) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 4, **fields}).encode()


def destination_header(response: pb.ProcessingResponse) -> str:
    common = getattr(response, response.WhichOneof("response")).response
    values = [
        h.header.raw_value.decode()
        for h in common.header_mutation.set_headers
        if h.header.key == "x-gateway-destination-endpoint"
    ]
    assert len(values) == 1, common
    assert common.clear_route_cache
    return values[0]


def destination_metadata(response: pb.ProcessingResponse) -> str:
    metadata = json_format.MessageToDict(response.dynamic_metadata)
    return metadata["envoy.lb"]["x-gateway-destination-endpoint"]


def cache_prompt_on(picker: Picker, endpoint: str, num_blocks: int) -> None:
    picker.ctx.index.store(f"http://{endpoint}", hash_blocks(PROMPT, BLOCK_SIZE, ROOT)[:num_blocks])


async def test_full_duplex_headers_wait_for_the_body_then_name_the_cached_replica_first(
    picker: Picker,
) -> None:
    cache_prompt_on(picker, B, 4)
    cache_prompt_on(picker, C, 2)
    body = completion()
    responses = await picker.exchange(
        headers(mode=ProcessingMode.FULL_DUPLEX_STREAMED), *body_frames(body)
    )
    first, *body_back = responses
    assert first.WhichOneof("response") == "request_headers"
    endpoints = destination_header(first).split(",")
    assert endpoints[0] == B
    assert sorted(endpoints) == sorted([A, B, C])  # ordered fallbacks, every eligible replica
    assert destination_metadata(first) == destination_header(first)
    returned = b"".join(
        r.request_body.response.body_mutation.streamed_response.body for r in body_back
    )
    assert returned == body
    assert body_back[-1].request_body.response.body_mutation.streamed_response.end_of_stream


async def test_a_prefixed_path_before_the_routes_rewrite_is_still_hashed(picker: Picker) -> None:
    cache_prompt_on(picker, C, 4)
    responses = await picker.exchange(headers("/llm/v1/completions"), *body_frames(completion()))
    assert destination_header(responses[0]).startswith(C + ",")


async def test_without_a_protocol_config_the_picker_speaks_full_duplex(picker: Picker) -> None:
    cache_prompt_on(picker, C, 4)
    responses = await picker.exchange(headers(), *body_frames(completion()))
    assert responses[0].WhichOneof("response") == "request_headers"
    assert destination_header(responses[0]).startswith(C + ",")


async def test_a_large_body_comes_back_in_pieces_in_order(picker: Picker) -> None:
    body = completion("x" * (3 * BODY_CHUNK_BYTES))
    responses = await picker.exchange(headers(), *body_frames(body, num_frames=7))
    pieces = [r.request_body.response.body_mutation.streamed_response for r in responses[1:]]
    assert len(pieces) == 4
    assert all(len(p.body) <= BODY_CHUNK_BYTES for p in pieces)
    assert b"".join(p.body for p in pieces) == body
    assert [p.end_of_stream for p in pieces] == [False, False, False, True]


async def test_trailers_end_a_full_duplex_body_too(picker: Picker) -> None:
    cache_prompt_on(picker, B, 4)
    body = pb.ProcessingRequest(request_body=pb.HttpBody(body=completion(), end_of_stream=False))
    trailers = pb.ProcessingRequest(request_trailers=pb.HttpTrailers())
    responses = await picker.exchange(headers(), body, trailers)
    assert [r.WhichOneof("response") for r in responses] == [
        "request_headers",
        "request_body",
        "request_trailers",
    ]
    assert destination_header(responses[0]).startswith(B + ",")
    streamed = responses[1].request_body.response.body_mutation.streamed_response
    assert (streamed.body, streamed.end_of_stream) == (completion(), False)  # the trailers end it


async def test_buffered_mode_continues_the_headers_and_answers_the_body_with_the_destination(
    picker: Picker,
) -> None:
    cache_prompt_on(picker, A, 4)
    responses = await picker.exchange(
        headers(mode=ProcessingMode.BUFFERED), *body_frames(completion(), 1)
    )
    assert [r.WhichOneof("response") for r in responses] == ["request_headers", "request_body"]
    assert not responses[0].request_headers.response.header_mutation.set_headers
    assert destination_header(responses[1]).startswith(A + ",")
    assert destination_metadata(responses[1]) == destination_header(responses[1])


async def test_a_buffered_body_over_grpcs_default_message_size_is_taken(picker: Picker) -> None:
    body = completion("z" * (5 * 1024 * 1024))  # gRPC's default limit is 4 MiB a message
    responses = await picker.exchange(headers(mode=ProcessingMode.BUFFERED), *body_frames(body, 1))
    assert len(destination_header(responses[1]).split(",")) == 3


async def test_a_request_without_a_body_is_picked_from_its_headers(picker: Picker) -> None:
    responses = await picker.exchange(headers("/v1/models", end_of_stream=True))
    assert len(responses) == 1
    assert len(destination_header(responses[0]).split(",")) == 3


async def test_the_subset_hint_limits_the_choice_and_its_fallbacks(picker: Picker) -> None:
    cache_prompt_on(picker, B, 4)  # the best replica overall is outside the subset
    responses = await picker.exchange(headers(subset=[A, C]), *body_frames(completion()))
    assert sorted(destination_header(responses[0]).split(",")) == [A, C]


async def test_a_comma_separated_subset_hint_is_read_too(picker: Picker) -> None:
    responses = await picker.exchange(headers(subset=f"{C}, {A}"), *body_frames(completion()))
    assert sorted(destination_header(responses[0]).split(",")) == [A, C]


def immediate_status(
    responses: list[pb.ProcessingResponse],
) -> tuple[int, dict[str, Any], dict[str, str]]:
    assert len(responses) == 1 and responses[0].WhichOneof("response") == "immediate_response"
    answer = responses[0].immediate_response
    headers = {h.header.key: h.header.raw_value.decode() for h in answer.headers.set_headers}
    return int(answer.status.code), json.loads(answer.body), headers


async def test_a_subset_with_no_known_endpoint_is_a_503(picker: Picker) -> None:
    responses = await picker.exchange(headers(subset=["10.9.9.9:8000"]), *body_frames(completion()))
    status, body, response_headers = immediate_status(responses)
    assert status == 503
    assert body["error"]["code"] == "no_eligible_endpoint"
    assert response_headers["content-type"] == "application/json"


async def test_an_empty_subset_is_a_503(picker: Picker) -> None:
    responses = await picker.exchange(headers(subset=[]), *body_frames(completion()))
    assert immediate_status(responses)[0] == 503


async def test_no_healthy_replica_is_a_503(picker: Picker) -> None:
    for replica in picker.ctx.replica_set.replicas.values():
        replica.healthy = False
    responses = await picker.exchange(headers(), *body_frames(completion()))
    status, body, response_headers = immediate_status(responses)
    assert (status, response_headers["retry-after"]) == (503, "1")
    assert "no eligible replica" not in body["error"]["message"]  # no hint: none is healthy


async def test_an_unhealthy_replica_is_neither_chosen_nor_a_fallback(picker: Picker) -> None:
    cache_prompt_on(picker, B, 4)
    picker.replica(B).healthy = False
    responses = await picker.exchange(headers(), *body_frames(completion()))
    assert sorted(destination_header(responses[0]).split(",")) == [A, C]


async def test_saturated_replicas_shed_with_a_429(picker: Picker) -> None:
    picker.ctx.config.picker_shed_ttft_ms = 50.0
    for replica in picker.ctx.replica_set.replicas.values():
        replica.load.num_requests_waiting = 10  # 10 x 256 tokens x 0.1 ms = 256 ms of queue
    responses = await picker.exchange(headers(), *body_frames(completion()))
    status, body, response_headers = immediate_status(responses)
    assert (status, body["error"]["code"], response_headers["retry-after"]) == (429, "shed", "1")


async def test_one_idle_replica_is_enough_not_to_shed(picker: Picker) -> None:
    picker.ctx.config.picker_shed_ttft_ms = 50.0
    for endpoint in (A, B):
        picker.replica(endpoint).load.num_requests_waiting = 10
    responses = await picker.exchange(headers(), *body_frames(completion()))
    assert destination_header(responses[0]).startswith(C + ",")


async def test_a_body_over_the_limit_is_a_413(
    picker: Picker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("router.picker.endpoint_picker.MAX_BODY_BYTES", 100)
    responses = await picker.exchange(headers(), *body_frames(completion("y" * 200)))
    assert immediate_status(responses)[0] == 413


async def test_a_body_that_is_not_json_is_still_routed_by_load(picker: Picker) -> None:
    responses = await picker.exchange(headers(), *body_frames(b"{not json", 1))
    assert len(destination_header(responses[0]).split(",")) == 3


def response_headers(served: str | None) -> pb.ProcessingRequest:
    request = pb.ProcessingRequest(response_headers=pb.HttpHeaders())
    if served is not None:
        meta = struct_pb2.Struct()
        meta.update({"x-gateway-destination-endpoint-served": served})
        request.metadata_context.filter_metadata["envoy.lb"].CopyFrom(meta)
    return request


async def test_the_request_counts_on_the_served_replica_until_its_stream_ends(
    picker: Picker,
) -> None:
    cache_prompt_on(picker, A, 4)
    requests = [headers(), *body_frames(completion())]
    stream = picker.stub.Process()
    for request in requests:
        await stream.write(request)
    first = await stream.read()
    assert destination_header(first).startswith(A + ",")
    handed_back = await stream.read()  # the (small) body, in one piece
    assert handed_back.request_body.response.body_mutation.streamed_response.end_of_stream
    assert len(picker.replica(A).inflight) == 1
    await stream.write(response_headers(served=C))  # the data plane fell back to C
    assert (await stream.read()).WhichOneof("response") == "response_headers"
    assert (len(picker.replica(A).inflight), len(picker.replica(C).inflight)) == (0, 1)
    assert next(iter(picker.replica(C).inflight.values())).started
    await stream.done_writing()
    assert await stream.read() == grpc.aio.EOF
    assert len(picker.replica(C).inflight) == 0


async def test_response_frames_pass_through_in_full_duplex_response_mode(picker: Picker) -> None:
    first = headers(end_of_stream=True)
    first.protocol_config.response_body_mode = ProcessingMode.FULL_DUPLEX_STREAMED  # type: ignore[assignment]
    chunk = pb.ProcessingRequest(
        response_body=pb.HttpBody(body=b"data: {}\n\n", end_of_stream=True)
    )
    responses = await picker.exchange(first, response_headers(served=None), chunk)
    streamed = responses[-1].response_body.response.body_mutation.streamed_response
    assert (streamed.body, streamed.end_of_stream) == (b"data: {}\n\n", True)


async def test_health_services_follow_the_protocol(picker: Picker) -> None:
    async def status(service: str) -> int:
        request = health_pb2.HealthCheckRequest(service=service)
        return int((await picker.health.Check(request)).status)

    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    for service in ("", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
        assert await status(service) == serving
    for replica in picker.ctx.replica_set.replicas.values():
        replica.healthy = False
    assert await status("liveness") == serving
    assert await status("readiness") == not_serving
    assert await status("envoy.service.ext_proc.v3.ExternalProcessor") == not_serving
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await status("no.such.Service")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def serve_models(picker: Picker, endpoint: str, *adapters: str) -> None:
    """The replica's GET /v1/models, as a health check would have read it."""
    cards = {"m": {"id": "m", "parent": None}, **{a: {"id": a, "parent": "m"} for a in adapters}}
    picker.replica(endpoint).served_models = ServedModels(cards)


async def test_an_adapters_request_is_picked_among_its_replicas_by_its_own_chain(
    picker: Picker,
) -> None:
    serve_models(picker, A, "sql")
    serve_models(picker, B)
    serve_models(picker, C, "sql")
    sql_blocks = hash_blocks(PROMPT, BLOCK_SIZE, lora_root_hash(ROOT, "sql"))
    picker.ctx.index.store(f"http://{C}", sql_blocks)
    cache_prompt_on(picker, A, 4)  # the base model's blocks: no hit for the adapter
    responses = await picker.exchange(headers(), *body_frames(completion(model="sql")))
    assert destination_header(responses[0]).split(",") == [C, A]


async def test_a_model_no_replica_serves_is_a_404(picker: Picker) -> None:
    for endpoint in (A, B, C):
        serve_models(picker, endpoint, "sql")
    responses = await picker.exchange(headers(), *body_frames(completion(model="nope")))
    status, body, response_headers = immediate_status(responses)
    assert (status, body["error"]["code"], body["error"]["type"]) == (
        404,
        "model_not_found",
        "not_found_error",
    )
    assert "retry-after" not in response_headers


async def test_a_clients_continuation_is_a_400(picker: Picker) -> None:
    body = completion(stream=True, continuation={"token_ids": [1, 2, 3]})
    responses = await picker.exchange(headers(), *body_frames(body))
    status, answer, _ = immediate_status(responses)
    assert (status, answer["error"]["code"]) == (400, "continuation_not_allowed")


def responses_body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "input": "tell me more", **fields}).encode()


def created_event(response_id: str) -> bytes:
    response = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
    event = {"type": "response.created", "sequence_number": 0, "response": response}
    return f"event: response.created\ndata: {json.dumps(event)}\n\n".encode()


async def respond(picker: Picker, body: bytes, answer: list[bytes], key: str = "k1") -> str:
    """One Responses API request through the picker, answered by `answer`'s frames (the
    gateway sends the response body): the endpoint the picker named first."""
    first = headers(
        "/v1/responses",
        mode=ProcessingMode.FULL_DUPLEX_STREAMED,
        extra={"authorization": f"Bearer {key}"},
    )
    first.protocol_config.response_body_mode = ProcessingMode.FULL_DUPLEX_STREAMED  # type: ignore[assignment]
    frames = [
        pb.ProcessingRequest(response_body=pb.HttpBody(body=piece, end_of_stream=i == len(answer)))
        for i, piece in enumerate(answer, start=1)
    ]
    responses = await picker.exchange(
        first, *body_frames(body), response_headers(served=None), *frames
    )
    return destination_header(responses[0]).split(",")[0]


async def test_a_responses_follow_up_goes_to_the_replica_that_made_its_response(
    picker: Picker,
) -> None:
    # The first turn's id is read from its stream's first event, cut between two frames.
    event = created_event("resp_1")
    made_on = await respond(picker, responses_body(stream=True), [event[:40], event[40:]])
    for endpoint in {A, B, C} - {made_on}:  # the policy alone would send it elsewhere
        cache_prompt_on(picker, endpoint, 4)
    follow_up = responses_body(previous_response_id="resp_1")
    answer = json.dumps({"id": "resp_2", "object": "response"}).encode()
    assert await respond(picker, follow_up, [answer[:5], answer[5:]]) == made_on
    assert picker.ctx.dispatcher.log.recent(1)[0].reason == "conversation"
    # A JSON answer teaches too, and the hint outranks load; another client's follow-up is
    # routed by the policy (by load: the conversation's replica is the busiest).
    picker.replica(made_on).load.num_requests_waiting = 10
    third = responses_body(previous_response_id="resp_2")
    assert await respond(picker, third, [b"{}"]) == made_on
    assert await respond(picker, third, [b"{}"], key="another") != made_on


async def test_an_embeddings_request_goes_among_the_replicas_of_its_adapter(
    picker: Picker,
) -> None:
    serve_models(picker, A)
    serve_models(picker, B, "sql")
    serve_models(picker, C)
    body = json.dumps({"model": "sql", "input": ["a", "b"]}).encode()
    responses = await picker.exchange(headers("/v1/embeddings"), *body_frames(body))
    assert destination_header(responses[0]) == B
    missing = json.dumps({"model": "nope", "input": "a"}).encode()
    responses = await picker.exchange(headers("/v1/embeddings"), *body_frames(missing))
    assert immediate_status(responses)[0] == 404
