"""The endpoint picker's gRPC server: Envoy's ext_proc service and the gRPC health services the
endpoint picker protocol lists, on --picker-port, in the router's process and event loop (one
replica set, one KV index, one in-flight count for HTTP clients and the gateway alike).

Health (grpc.health.v1.Health, Check and Watch):
    liveness, ""                                   SERVING while the process answers
    readiness, envoy.service.ext_proc.v3.ExternalProcessor
                                                   SERVING while at least one replica is healthy
    anything else                                  NOT_FOUND (Check) / SERVICE_UNKNOWN (Watch)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pagedock.errors import ConfigError
from pagedock.limits import MAX_BODY_BYTES
from router.picker.endpoint_picker import EndpointPicker

if TYPE_CHECKING:
    from router.server.context import RouterContext

logger = logging.getLogger("pagedock.router.picker")
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS_SERVICES = frozenset({"", "liveness"})
READINESS_SERVICES = frozenset({"readiness", EXT_PROC_SERVICE})
Status = int  # health_pb2.HealthCheckResponse.ServingStatus values
SHUTDOWN_GRACE_S = 5.0


class PickerHealth(health_pb2_grpc.HealthServicer):
    def __init__(self, ctx: RouterContext) -> None:
        self.ctx = ctx

    def status(self, service: str) -> Status | None:
        if service in LIVENESS_SERVICES:
            return health_pb2.HealthCheckResponse.SERVING
        if service in READINESS_SERVICES:
            ready = bool(self.ctx.replica_set.healthy())
            return (
                health_pb2.HealthCheckResponse.SERVING
                if ready
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
        return None

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self.status(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        """The status now, then each change (checked every --health-interval-s)."""
        last: Status | None = None
        while True:
            status = self.status(request.service)
            if status is None:
                status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            await asyncio.sleep(self.ctx.config.health_interval_s)


async def start_picker(ctx: RouterContext) -> grpc.aio.Server:
    """Serve the endpoint picker on --host:--picker-port (started, so the port is bound)."""
    assert ctx.config.picker_port is not None
    # NOTE: a buffered body arrives as one message: allow the router's whole body limit (gRPC's
    # default is 4 MiB) plus room for the headers around it.
    limit = MAX_BODY_BYTES + 1024 * 1024
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit)])
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(EndpointPicker(ctx), server)
    health_pb2_grpc.add_HealthServicer_to_server(PickerHealth(ctx), server)
    host = ctx.config.host
    address = (
        f"[{host}]:{ctx.config.picker_port}" if ":" in host else f"{host}:{ctx.config.picker_port}"
    )
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
        raise ConfigError(f"the endpoint picker cannot listen on {address}: {e}") from e
    if not bound:
        raise ConfigError(f"the endpoint picker cannot listen on {address}")
    await server.start()
    logger.info("endpoint picker (ext_proc) listening on %s", address)
    return server


async def stop_picker(server: grpc.aio.Server) -> None:
    """Let open streams finish for a few seconds (in-flight requests keep their accounting)."""
    await server.stop(SHUTDOWN_GRACE_S)
