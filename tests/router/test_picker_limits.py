"""The endpoint picker port's authentication and limits (router/picker/stream_guard.py): the key
in gRPC metadata, the cap on open streams, the idle timeout that ends a silent stream and
releases its pick, and the body budget the collected bodies count in; a good stream is still
served while bad ones use the caps. Driven as Envoy drives the picker (a gRPC client)."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from grpc_health.v1 import health_pb2

from pagedock.errors import ConfigError
from pagedock.limits import MAX_BODY_BYTES, MIN_BODY_BUDGET_BYTES
from router.kv.prompt_hasher import PromptHasher
from router.picker.picker_server import start_picker, stop_picker
from router.replicas.discovery.static import StaticDiscovery
from router.replicas.replica import Replica
from router.server.context import RouterContext
from tests.eventually import eventually
from tests.router.factories import make_config
from tests.router.live import free_port
from tests.router.test_endpoint_picker import (
    BLOCK_SIZE,
    ROOT,
    Picker,
    body_frames,
    completion,
    destination_header,
    headers,
    immediate_status,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
ENDPOINTS = ("10.0.0.1:8000", "10.0.0.2:8000")
KEY = "picker-secret"
GATEWAY = (("authorization", f"Bearer {KEY}"),)
CN = "picker.test"


@asynccontextmanager
async def running_picker(
    tls: grpc.ChannelCredentials | None = None, **overrides: Any
) -> AsyncIterator[Picker]:
    config = make_config(
        replicas=[f"http://{e}" for e in ENDPOINTS],
        host="127.0.0.1",
        picker_port=free_port(),
        block_size=BLOCK_SIZE,
        **overrides,
    )
    ctx = RouterContext(config, PromptHasher(None), StaticDiscovery(config.replicas))
    for url in config.replicas:
        ctx.replica_set.replicas[url] = Replica(
            url, root_hash=ROOT, block_size=BLOCK_SIZE, kv_synced=True
        )
    server = await start_picker(ctx)
    target = f"127.0.0.1:{config.picker_port}"
    channel = (
        grpc.aio.insecure_channel(target)
        if tls is None
        else grpc.aio.secure_channel(target, tls, options=[("grpc.ssl_target_name_override", CN)])
    )
    try:
        yield Picker(ctx, channel)
    finally:
        await channel.close()
        await stop_picker(server)


def num_inflight(picker: Picker) -> int:
    """What /router/demand reports as num_inflight (the sum over replicas)."""
    return sum(len(r.inflight) for r in picker.ctx.replica_set.replicas.values())


async def half_open(picker: Picker, **call: Any) -> Any:
    """A stream that takes a destination (a request without a body) and then says nothing."""
    stream = picker.stub.Process(**call)
    await stream.write(headers(end_of_stream=True))
    assert destination_header(await stream.read())
    return stream


async def served(picker: Picker, **call: Any) -> str:
    """A whole request's stream; the destination it was given."""

    async def messages() -> AsyncIterator[pb.ProcessingRequest]:
        for request in [headers(), *body_frames(completion())]:
            yield request

    responses = [r async for r in picker.stub.Process(messages(), **call)]
    return destination_header(responses[0])


async def refusal(picker: Picker, **call: Any) -> grpc.StatusCode:
    """The status a stream ends with when the picker refuses it before its first message.

    NOTE: nothing is written: a write racing the server's refusal fails in the client's grpc
    core (INTERNAL), which would hide the status the server sent."""
    stream = picker.stub.Process(**call)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stream.read()
    code: grpc.StatusCode = refused.value.code()
    return code


async def test_a_stream_without_the_key_is_unauthenticated() -> None:
    async with running_picker(picker_api_key=KEY) as picker:
        assert await refusal(picker) == grpc.StatusCode.UNAUTHENTICATED
        wrong = (("authorization", "Bearer other"),)
        assert await refusal(picker, metadata=wrong) == grpc.StatusCode.UNAUTHENTICATED
        assert num_inflight(picker) == 0


async def test_a_stream_with_the_key_is_served() -> None:
    async with running_picker(picker_api_key=KEY) as picker:
        assert set((await served(picker, metadata=GATEWAY)).split(",")) == set(ENDPOINTS)


async def test_the_health_service_needs_no_key() -> None:
    async with running_picker(picker_api_key=KEY) as picker:
        answer = await picker.health.Check(health_pb2.HealthCheckRequest(service="readiness"))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_stream_past_the_cap_is_refused_while_those_under_way_are_served() -> None:
    async with running_picker(picker_max_streams=2) as picker:
        first, second = await half_open(picker), await half_open(picker)
        assert await refusal(picker) == grpc.StatusCode.RESOURCE_EXHAUSTED
        await first.done_writing()
        assert await first.read() == grpc.aio.EOF
        assert await served(picker)  # the freed place takes a new stream
        await second.done_writing()
        assert await second.read() == grpc.aio.EOF


async def test_a_good_stream_is_served_while_bad_ones_hold_streams_and_picks() -> None:
    async with running_picker(picker_max_streams=3) as picker:
        bad = [await half_open(picker), await half_open(picker)]
        assert num_inflight(picker) == 2
        assert await served(picker)
        for stream in bad:
            stream.cancel()


async def test_an_idle_stream_is_closed_and_its_pick_released() -> None:
    async with running_picker(picker_stream_idle_timeout_s=0.3) as picker:
        stream = await half_open(picker)
        assert num_inflight(picker) == 1
        assert await stream.read() == grpc.aio.EOF  # the picker ended the silent stream
        assert await stream.code() == grpc.StatusCode.OK
        await eventually(lambda: num_inflight(picker) == 0, what=lambda: f"{num_inflight(picker)}")


async def test_a_stream_that_dies_releases_its_pick() -> None:
    async with running_picker() as picker:
        stream = await half_open(picker)
        assert num_inflight(picker) == 1
        stream.cancel()
        await eventually(lambda: num_inflight(picker) == 0, what=lambda: f"{num_inflight(picker)}")


async def test_a_body_past_the_budget_is_a_503_and_a_small_one_still_served() -> None:
    big = MAX_BODY_BYTES * 3 // 4
    async with running_picker(max_buffered_body_bytes=MIN_BODY_BUDGET_BYTES) as picker:
        budget = picker.ctx.body_budget
        holder = picker.stub.Process()  # a body that never ends, holding 3/4 of the budget
        await holder.write(headers())
        await holder.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"x" * big)))
        await eventually(lambda: budget.used_bytes == big, what=lambda: f"{budget.used_bytes}")
        responses = await picker.exchange(headers(), *body_frames(b"y" * big, 1))
        status, answer, _ = immediate_status(responses)
        assert (status, answer["error"]["code"]) == (503, "router_memory_full")
        assert await served(picker)
        holder.cancel()
        await eventually(lambda: budget.used_bytes == 0, what=lambda: f"{budget.used_bytes}")


async def test_an_idle_stream_gives_its_body_back_to_the_budget() -> None:
    async with running_picker(picker_stream_idle_timeout_s=0.3) as picker:
        stream = picker.stub.Process()
        await stream.write(headers())
        await stream.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"x" * 1000)))
        assert await stream.read() == grpc.aio.EOF
        assert picker.ctx.body_budget.used_bytes == 0


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for CN (its own CA) and its key, as PEM files."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    args = ["req", "-x509", "-nodes", "-days", "1", "-newkey", "ec"]
    args += ["-pkeyopt", "ec_paramgen_curve:prime256v1"]
    names = ["-subj", f"/CN={CN}", "-addext", f"subjectAltName=DNS:{CN}"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(["openssl", *args, *names, *files], check=True, capture_output=True)
    return cert, key


async def test_the_picker_port_serves_tls_from_pem_files(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "picker")
    tls = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    files = {"picker_tls_cert_file": str(cert), "picker_tls_key_file": str(key)}
    async with running_picker(tls, **files) as picker:
        assert await served(picker)


async def test_mutual_tls_refuses_a_client_without_the_cas_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "picker")
    gateway_cert, gateway_key = self_signed(tmp_path, "gateway")
    files = {
        "picker_tls_cert_file": str(cert),
        "picker_tls_key_file": str(key),
        "picker_tls_client_ca_file": str(gateway_cert),
    }
    anonymous = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    async with running_picker(anonymous, **files) as picker:
        assert await refusal(picker) == grpc.StatusCode.UNAVAILABLE
    gateway = grpc.ssl_channel_credentials(
        cert.read_bytes(), gateway_key.read_bytes(), gateway_cert.read_bytes()
    )
    async with running_picker(gateway, **files) as picker:
        assert await served(picker)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"picker_tls_cert_file": "/tls/picker.crt"}, "picker_tls_cert_file and picker_tls_key"),
        ({"picker_tls_client_ca_file": "/tls/ca.crt"}, "needs picker_tls_cert_file"),
        ({"picker_max_streams": -1}, "picker_max_streams must be 0"),
        ({"picker_stream_idle_timeout_s": 0}, "picker_stream_idle_timeout_s must be more"),
        ({"picker_api_key": " "}, "picker_api_key must not be empty"),
    ],
)
async def test_bad_picker_settings_are_config_errors(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_config(**overrides)
