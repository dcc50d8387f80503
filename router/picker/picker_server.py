"""The endpoint picker's gRPC server: Envoy's ext_proc service and the gRPC health services the
endpoint picker protocol lists, on --picker-port, in the router's process and event loop (one
replica set, one KV index, one in-flight count for HTTP clients and the gateway alike).

Health (grpc.health.v1.Health, Check and Watch):
    liveness, ""                                   SERVING while the process answers
    readiness, envoy.service.ext_proc.v3.ExternalProcessor
                                                   SERVING while at least one replica is healthy
    anything else                                  NOT_FOUND (Check) / SERVICE_UNKNOWN (Watch)

The ext_proc service sits behind StreamGuard (its key, stream cap and idle timeout,
router/picker/stream_guard.py); the port serves TLS, mutual with a client CA, from
--picker-tls-cert-file and --picker-tls-key-file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pagedock.errors import ConfigError
from pagedock.limits import MAX_BODY_BYTES
from router.picker.endpoint_picker import EndpointPicker
from router.picker.stream_guard import StreamGuard

if TYPE_CHECKING:
    from router.picker_config import PickerConfig
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
    guarded = StreamGuard(EndpointPicker(ctx), ctx.config)
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(guarded, server)
    health_pb2_grpc.add_HealthServicer_to_server(PickerHealth(ctx), server)
    host = ctx.config.host
    address = (
        f"[{host}]:{ctx.config.picker_port}" if ":" in host else f"{host}:{ctx.config.picker_port}"
    )
    credentials = server_credentials(ctx.config)
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as e:
        raise ConfigError(f"the endpoint picker cannot listen on {address}: {e}") from e
    if not bound:
        raise ConfigError(f"the endpoint picker cannot listen on {address}")
    await server.start()
    tls = "plaintext" if credentials is None else "TLS"
    logger.info("endpoint picker (ext_proc) listening on %s (%s)", address, tls)
    return server


def server_credentials(config: PickerConfig) -> grpc.ServerCredentials | None:
    """TLS (mutual with --picker-tls-client-ca-file) from the PEM files; None = plaintext."""
    if config.picker_tls_cert_file is None or config.picker_tls_key_file is None:
        return None
    cert = _read_pem("picker_tls_cert_file", config.picker_tls_cert_file)
    key = _read_pem("picker_tls_key_file", config.picker_tls_key_file)
    client_ca = config.picker_tls_client_ca_file
    ca = _read_pem("picker_tls_client_ca_file", client_ca) if client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def _read_pem(name: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name}: cannot read {path}: {e}") from e


async def stop_picker(server: grpc.aio.Server) -> None:
    """Let open streams finish for a few seconds (in-flight requests keep their accounting)."""
    await server.stop(SHUTDOWN_GRACE_S)
