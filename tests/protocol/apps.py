"""The engine's server app and the router's app, built without a model or replicas, for tests of
what both answer the same way (errors, the API key, /tokenize).

Neither app's lifespan runs (TestClient is not entered), so no engine loop or discovery starts.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from pagedock.text.tokenizer import Tokenizer


class _IdleEngine:
    """Stands in for AsyncEngine where a route only asks whether the loop is alive."""

    is_alive = True


def server_app(tokenizer: Tokenizer | None = None, api_key: str | None = None) -> FastAPI:
    from engine.server.app import build_app
    from engine.server.openai.context import ServerContext, ServerOptions

    ctx = ServerContext(
        engine=_IdleEngine(),  # type: ignore[arg-type]
        metrics=None,  # type: ignore[arg-type]
        kv_hub=None,  # type: ignore[arg-type]
        tokenizer=tokenizer,
        served_model_name="tiny",
        model_root="/models/tiny",
        max_model_len=4096,
        options=ServerOptions(api_key=api_key),
    )
    return build_app(ctx)


def router_app(api_key: str | None = None) -> FastAPI:
    """A router that knows no replica: past its guard, every API call is a 503."""
    from router.config import RouterConfig
    from router.kv.prompt_hasher import PromptHasher
    from router.replicas.discovery.static import StaticDiscovery
    from router.server.app import build_app
    from router.server.context import RouterContext

    config = RouterConfig(replicas=["http://127.0.0.1:1"], model=None, api_key=api_key)
    return build_app(RouterContext(config, PromptHasher(None), StaticDiscovery(config.replicas)))


def client(app: FastAPI, **headers: Any) -> TestClient:
    return TestClient(app, raise_server_exceptions=False, headers=headers)
