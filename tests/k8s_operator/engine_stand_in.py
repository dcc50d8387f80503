"""A stand-in for one engine's LoRA endpoints (vLLM's contract, as `pagedock serve
--enable-lora --allow-runtime-lora-updating` serves them), for the adapter reconciler's tests:

    GET  /v1/models               the base model, then each adapter {"id", "parent", "root"}
    POST /v1/load_lora_adapter    200 (again for the same name and path); 400 in OpenAI's error
                                  shape for a path in `bad_paths` or a name served from another
    POST /v1/unload_lora_adapter  200; 404 for a name not served
    GET  /drain                   `drain_report` (engine/server/drain.py's shape), settable
Behind a Bearer key when `api_key` is set (401 otherwise). Every request is recorded. Several
stand-ins listen on the same port at different loopback addresses (127.0.0.2, 127.0.0.3, ...), as
engine pods do at their pod IPs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiohttp import web
from llm_operator.names import child_labels

from tests.k8s_operator.helpers import NAMESPACE

BASE_MODEL = "smollm2-135m-instruct"


def engine_pod(
    name: str,
    ip: str,
    *,
    ready: bool = True,
    revision: str | None = None,
    created: str | None = None,
) -> dict[str, Any]:
    """A running engine pod of the LLMDeployment `chat` at `ip` (a stand-in's address), in the
    tests' namespace; `revision` its pod-template-hash, `created` its creationTimestamp."""
    labels = child_labels("chat", "engine")
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels}
    if revision is not None:
        labels["pod-template-hash"] = revision
    if created is not None:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "engine", "image": "engine"}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": str(ready)}],
        },
    }


class StandInServer:
    """An engine's HTTP endpoints at one loopback address (its pod IP); several stand-ins share a
    port at different addresses, as engine pods do."""

    def __init__(self, ip: str) -> None:
        self.ip = ip
        self.port = 0
        self._runner: web.AppRunner | None = None

    def add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self, port: int = 0) -> int:
        app = web.Application()
        self.add_routes(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.ip, port)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        return self.port

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


StandIn = TypeVar("StandIn", bound=StandInServer)


@contextlib.asynccontextmanager
async def on_one_port(stand_ins: list[StandIn]) -> AsyncIterator[list[StandIn]]:
    """`stand_ins` started on one port (the first one picks it), closed when the block ends."""
    port = await stand_ins[0].start()
    for stand_in in stand_ins[1:]:
        await stand_in.start(port)
    try:
        yield stand_ins
    finally:
        for stand_in in stand_ins:
            await stand_in.close()


class EngineStandIn(StandInServer):
    def __init__(self, ip: str, api_key: str | None = None) -> None:
        super().__init__(ip)
        self.api_key = api_key
        self.adapters: dict[str, str] = {}
        """name -> path, as loaded."""
        self.bad_paths: dict[str, str] = {}
        """path -> the reason a load of it is refused."""
        self.drain_report: dict[str, Any] = drain_report()
        """GET /drain's body."""
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        """(method, path, body) of every request."""

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/load_lora_adapter", self._load)
        app.router.add_post("/v1/unload_lora_adapter", self._unload)
        app.router.add_get("/drain", self._drain)

    def calls(self, path: str) -> list[dict[str, Any]]:
        return [body for _, called, body in self.requests if called == path]

    def _authorised(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == (
            f"Bearer {self.api_key}"
        )

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.json() if request.method == "POST" else {}
        self.requests.append((request.method, request.path, body))
        return dict(body)

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        if not self._authorised(request):
            return _error(401, "Invalid API key")
        cards = [{"id": BASE_MODEL, "object": "model", "root": "/opt/model", "parent": None}]
        cards += [
            {"id": name, "object": "model", "root": path, "parent": BASE_MODEL}
            for name, path in self.adapters.items()
        ]
        return web.json_response({"object": "list", "data": cards})

    async def _load(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if not self._authorised(request):
            return _error(401, "Invalid API key")
        name, path = body["lora_name"], body["lora_path"]
        if path in self.bad_paths:
            return _error(400, self.bad_paths[path])
        if self.adapters.get(name, path) != path:
            return _error(400, f"LoRA adapter {name!r} is already served from another path")
        self.adapters[name] = path
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if not self._authorised(request):
            return _error(401, "Invalid API key")
        if self.adapters.pop(body["lora_name"], None) is None:
            return _error(404, f"The lora adapter '{body['lora_name']}' cannot be found.")
        return web.Response(text="Success: LoRA adapter removed successfully.")

    async def _drain(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response(self.drain_report)


def drain_report(
    longest: float | None = None, p99: float | None = None, oldest: float | None = None
) -> dict[str, Any]:
    """A GET /drain body as an engine with the default --drain-timeout writes it."""
    return {
        "drain_timeout_seconds": 30.0,
        "handoff_seconds": 7.0,
        "draining": False,
        "num_requests": 0 if longest is None else 100,
        "longest_request_seconds": longest,
        "p99_request_seconds": p99,
        "oldest_in_flight_seconds": oldest,
    }


def _error(status: int, message: str) -> web.Response:
    error = {"message": message, "type": "BadRequestError", "param": None, "code": status}
    return web.json_response({"error": error}, status=status)
