"""The router's connection limits reach uvicorn.run."""

from __future__ import annotations

from router.config import RouterConfig
from router.server.cli import uvicorn_options


def test_connection_limits_reach_uvicorn_options() -> None:
    config = RouterConfig(
        replicas=["http://a:1"], max_connections=9, keep_alive_timeout_s=3, request_read_timeout_s=4
    )
    options = uvicorn_options(config, "info")
    assert "limit_concurrency" not in options  # the protocol's cap answers in OpenAI's shape
    assert options["http"].max_connections == 9
    assert options["timeout_keep_alive"] == 3
    assert options["http"].read_timeout_s == 4
    unlimited = uvicorn_options(RouterConfig(replicas=["http://a:1"], max_connections=0), "info")
    assert unlimited["http"].max_connections == 0
