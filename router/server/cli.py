"""`pagedock route`: the router's command line. A flag per RouterConfig field (dashes for
underscores), each also read from `PAGEDOCK_<NAME>` (a flag on the command line wins);
`--replica` repeats (env: PAGEDOCK_REPLICAS, comma-separated)."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Any

from pagedock.errors import PagedockError
from pagedock.http.limits import limited_protocol
from pagedock.logs import check_log_format, configure_logging
from pagedock.options import add_options, values_for
from pagedock.tracing.tracer import start_tracing
from pagedock.tracing.tracing_config import traces_endpoint
from router.config import RouterConfig

ENV_PREFIX = "PAGEDOCK_"


@dataclass
class RouteLogging:
    """The process's own settings, beside the router's (RouterConfig)."""

    log_level: str = "info"
    """debug, info, warning or error."""
    log_format: str = "text"
    """text (a line a person reads) or json (one JSON object a line, with the request's
    x_request_id and W3C trace_id: docs/server.md#logs)."""
    otlp_traces_endpoint: str | None = None
    """Export each request's spans (OpenTelemetry, OTLP over HTTP) to this URL; the standard
    OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables turn it on too (docs/observability.md)."""


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logs = RouteLogging(**values_for(RouteLogging, ns))
    try:
        check_log_format(logs.log_format)
        traces_endpoint(logs.otlp_traces_endpoint)
        config = RouterConfig(**values_for(RouterConfig, ns))
    except PagedockError as e:
        print(f"pagedock route: error: {e}", file=sys.stderr)
        return 2
    return run(config, logs)


def run(config: RouterConfig, logs: RouteLogging | None = None) -> int:
    import uvicorn

    from router.server.app import build_app
    from router.server.context import RouterContext

    logs = logs or RouteLogging()
    configure_logging(logs.log_level, logs.log_format)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per proxied request otherwise
    try:
        ctx = RouterContext.from_config(config)
    except PagedockError as e:
        print(f"pagedock route: error: {e}", file=sys.stderr)
        return 2
    ctx.tracing = start_tracing("pagedock-router", logs.otlp_traces_endpoint)
    try:
        uvicorn.run(build_app(ctx), **uvicorn_options(config, logs.log_level))
    finally:
        if ctx.tracing is not None:
            ctx.tracing.shutdown()  # the last requests' spans go out
    return 0


def uvicorn_options(config: RouterConfig, log_level: str) -> dict[str, Any]:
    """uvicorn.run's keyword arguments: the listening address and connection limits."""
    return {
        "host": config.host,
        "port": config.port,
        "log_config": None,
        "log_level": log_level,
        "access_log": False,
        "timeout_keep_alive": config.keep_alive_timeout_s,
        # The read deadline, and the connection cap answered with OpenAI's 503 (not uvicorn's).
        "http": limited_protocol(config.request_read_timeout_s, config.max_connections),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagedock route",
        description="Route OpenAI-compatible requests to the engine replica that holds the "
        "request's cached KV blocks, balanced against load, with failover. Every option can "
        f"also be set as an environment variable {ENV_PREFIX}<OPTION>; booleans take "
        "1/true/yes/on or 0/false/no/off.",
    )
    add_options(parser, RouterConfig, ENV_PREFIX)
    add_options(parser, RouteLogging, ENV_PREFIX)
    return parser
