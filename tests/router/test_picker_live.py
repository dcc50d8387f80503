"""`pagedock route --picker-port`: one router process serves the OpenAI API over HTTP and the
endpoint picker over gRPC, from the same replica set (a fake replica that it health-checks)."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from router.kv.prompt_hasher import PromptHasher
from router.replicas.discovery.static import StaticDiscovery
from router.server.app import build_app
from router.server.cli import build_parser
from router.server.context import RouterContext
from tests.router.factories import make_config
from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.live import Process, free_port, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def router() -> Iterator[tuple[grpc.Channel, str, str]]:
    """(channel to the picker, the router's HTTP URL, the replica's ip:port)."""
    with contextlib.ExitStack() as stack:
        replica = stack.enter_context(ServerThread(FakeReplica().app))
        config = make_config(replicas=[replica.url], picker_port=free_port(), health_interval_s=0.2)
        ctx = RouterContext(config, PromptHasher(None), StaticDiscovery(config.replicas))
        http = stack.enter_context(ServerThread(build_app(ctx)))
        channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{config.picker_port}"))
        yield channel, http.url, f"127.0.0.1:{replica.port}"


def test_the_picker_serves_beside_the_http_api_from_the_same_replicas(
    router: tuple[grpc.Channel, str, str],
) -> None:
    channel, _, endpoint = router
    health = health_pb2_grpc.HealthStub(channel)
    ready = health_pb2.HealthCheckRequest(service="readiness")
    wait_until(
        lambda: health.Check(ready, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    )
    fields = {":method": "POST", ":path": "/v1/completions"}
    header_map = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in fields.items()]
    )
    body = json.dumps({"model": "fake", "prompt": "hello"}).encode()
    requests = [
        pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=header_map)),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)),
    ]
    responses = list(pb_grpc.ExternalProcessorStub(channel).Process(iter(requests), timeout=10))
    mutation = responses[0].request_headers.response.header_mutation.set_headers
    assert [(h.header.key, h.header.raw_value.decode()) for h in mutation] == [
        ("x-gateway-destination-endpoint", endpoint)
    ]


def test_the_picker_is_off_unless_its_port_is_given() -> None:
    assert build_parser().parse_args([]).picker_port is None
    assert build_parser().parse_args(["--picker-port", "9002"]).picker_port == 9002


def test_pagedock_route_serves_the_picker_and_a_sigterm_stops_both(tmp_path: Path) -> None:
    picker_port = free_port()
    with ServerThread(FakeReplica().app) as replica:
        args = [
            "route",
            "--model",
            "",
            "--port",
            str(free_port()),
            "--picker-port",
            str(picker_port),
            "--replica",
            replica.url,
        ]
        router = Process(args, tmp_path / "router.log").start()
        try:
            router.wait_ready(timeout_s=60)
            with grpc.insecure_channel(f"127.0.0.1:{picker_port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                answer = health.Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=10)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
            assert router.proc is not None
            router.proc.send_signal(signal.SIGTERM)
            # uvicorn shuts down, then re-raises the SIGTERM it handled: -15 after a clean stop.
            assert router.proc.wait(timeout=30) in (0, -signal.SIGTERM)
            assert "Application shutdown complete" in router.log.read_text()
        finally:
            router.kill()
