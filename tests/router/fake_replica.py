"""FakeReplica: an engine stand-in on loopback whose answers a test scripts (failures included),
an in-process server thread for it or for the router app, and serve_router to start the
latter."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from pagedock.tracing.tracer import Tracing
from router.config import RouterConfig
from router.kv.prompt_hasher import PromptHasher
from router.replicas.discovery.static import StaticDiscovery
from router.server.app import build_app
from router.server.context import RouterContext
from tests.router.live import free_port


class ServerThread:
    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve_router(
    stack: ExitStack, replica_urls: list[str], tracing: Tracing | None = None, **overrides: object
) -> str:
    """A router (no tokenizer) in front of `replica_urls`, served until `stack` closes; its spans
    to `tracing` when given."""
    fields: dict[str, object] = {"health_interval_s": 0.2, **overrides}
    config = RouterConfig(replicas=replica_urls, model=None, **fields)  # type: ignore[arg-type]
    ctx = RouterContext(config, PromptHasher(None), StaticDiscovery(config.replicas))
    ctx.tracing = tracing
    return stack.enter_context(ServerThread(build_app(ctx))).url


class FakeReplica:
    """`mode` scripts the replica: ok | stream | break | slow | bad | unavailable (503 draining) |
    dead (503 engine_dead) | poison (500 engine_error: this request failed) | inf_load (answers ok,
    reports +Inf and NaN load in /metrics) | locked (answers ok, refuses the KV events with 401) |
    hang (never answers a completion). Setting `frozen` stops it as SIGSTOP would (health checks,
    requests and streams all hang); setting `health_down` fails only its health checks (503).

    It serves the base model `fake` and the LoRA `adapters` (a name -> path map a test may change,
    as /v1/load_lora_adapter would), listed in GET /v1/models as pagedock and vLLM list them; a
    request naming another model is a 404 `model_not_found`. `resident` (when set) is what its
    vllm:lora_requests_info reports running; `models_refused` answers GET /v1/models with a 500
    (`models_asked` counts the asks).

    It answers the Responses API too (`responses_routes`): POST /v1/responses as JSON, or with
    `stream: true` as events (`response.created` first, carrying the id; with `stream_gate` set,
    the rest waits for it), and GET/DELETE/input_items from its own store (`stored`), as an
    engine with a memory store does; `response_calls` counts the POSTs."""

    def __init__(
        self, mode: str = "ok", adapters: dict[str, str] | None = None, base: str = "fake"
    ) -> None:
        self.mode = mode
        self.base = base
        self.adapters = dict(adapters or {})
        self.resident: list[str] | None = None
        self.models_refused = threading.Event()
        self.models_seen: list[str | None] = []
        self.models_asked = 0
        self.calls = 0
        self.completion_tokens: int | None = None
        """When set, an `ok` answer reports this many completion tokens in its `usage`."""
        self.last_headers: dict[str, str] = {}
        self.last_body = b""
        self.stream_cancelled = threading.Event()
        self.frozen = threading.Event()
        self.health_down = threading.Event()
        self.stored: dict[str, dict[str, Any]] = {}
        self.response_calls = 0
        self.last_query = ""
        self.stream_gate: threading.Event | None = None
        self.app = self._build()
        responses_routes(self)

    def _completion(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
        }
        if self.completion_tokens is not None:
            n = self.completion_tokens
            answer["usage"] = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
        return answer

    def _build(self) -> FastAPI:
        app = FastAPI()
        instance = uuid.uuid4().hex

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            try:
                model = json.loads(await request.body()).get("model")
            except (ValueError, AttributeError):
                model = None  # not a JSON object: answered as before
            if model not in (None, self.base, *self.adapters):
                return _error(404, f"the model {model!r} does not exist", "model_not_found")
            self.models_seen.append(model)
            self.calls += 1
            self.last_headers = dict(request.headers)
            self.last_body = await request.body()
            while self.mode == "hang" or self.frozen.is_set():
                await asyncio.sleep(0.05)
            if self.mode == "bad":
                return JSONResponse(
                    {
                        "error": {
                            "message": "bad",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": None,
                        }
                    },
                    400,
                )
            if self.mode == "unavailable":
                return JSONResponse(
                    {
                        "error": {
                            "message": "down",
                            "type": "service_unavailable_error",
                            "param": None,
                            "code": "draining",
                        }
                    },
                    503,
                )
            if self.mode == "dead":
                return JSONResponse(
                    {
                        "error": {
                            "message": "dead",
                            "type": "service_unavailable_error",
                            "param": None,
                            "code": "engine_dead",
                        }
                    },
                    503,
                )
            if self.mode == "poison":
                return JSONResponse(
                    {
                        "error": {
                            "message": "generation failed",
                            "type": "internal_server_error",
                            "param": None,
                            "code": "engine_error",
                        }
                    },
                    500,
                )
            if self.mode in ("ok", "inf_load", "locked"):
                return JSONResponse(self._completion())
            return StreamingResponse(self._events(), media_type="text/event-stream")

        @app.get("/health")
        async def health() -> Response:
            while self.frozen.is_set():
                await asyncio.sleep(0.05)
            if self.health_down.is_set():
                return JSONResponse({"status": "draining"}, 503)
            return JSONResponse({"status": "ok"})

        @app.get("/metrics")
        async def metrics() -> Response:
            if self.mode == "inf_load":
                return Response(
                    'vllm:num_requests_running{model_name="fake"} +Inf\n'
                    'vllm:num_requests_waiting{model_name="fake"} NaN\n'
                )
            text = 'vllm:num_requests_running{model_name="fake"} 0.0\n'
            if self.resident is not None:
                running = ",".join(self.resident)
                text += (
                    f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{running}",'
                    f'waiting_lora_adapters=""}} {time.time()}\n'
                )
            return Response(text)

        @app.get("/v1/models")
        async def models() -> Response:
            self.models_asked += 1
            if self.models_refused.is_set():
                return _error(500, "models unavailable", "engine_error")
            return JSONResponse({"object": "list", "data": self.model_cards()})

        @app.get("/v1/kv/events")
        async def events() -> Response:
            if self.mode == "locked":
                return JSONResponse(
                    {
                        "error": {
                            "message": "key",
                            "type": "authentication_error",
                            "param": None,
                            "code": "invalid_api_key",
                        }
                    },
                    401,
                )

            async def lines() -> AsyncIterator[str]:
                yield (
                    json.dumps(
                        {
                            "type": "snapshot",
                            "instance_id": instance,
                            "seq": -1,
                            "block_size": 16,
                            "block_hashes": [],
                            "root_hash": "00",
                        }
                    )
                    + "\n"
                )
                await asyncio.sleep(3600)

            return StreamingResponse(lines(), media_type="application/x-ndjson")

        return app

    def model_cards(self) -> list[dict[str, Any]]:
        base = {"id": self.base, "object": "model", "owned_by": "pagedock", "root": "/m"}
        adapters = [
            {
                "id": name,
                "object": "model",
                "owned_by": "pagedock",
                "root": path,
                "parent": self.base,
            }
            for name, path in self.adapters.items()
        ]
        return [{**base, "parent": None}, *adapters]

    async def _events(self) -> AsyncIterator[str]:
        try:
            for i in range(1000 if self.mode == "slow" else 3):
                yield f'data: {{"choices": [{{"index": 0, "text": "t{i}"}}]}}\n\n'
                await asyncio.sleep(0.05)
                while self.frozen.is_set():
                    await asyncio.sleep(0.05)
            if self.mode == "break":
                raise RuntimeError("the replica died mid-stream")
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.stream_cancelled.set()
            raise


def _error(status: int, message: str, code: str) -> Response:
    error = {"message": message, "type": "invalid_request_error", "param": "model", "code": code}
    return JSONResponse({"error": error}, status)


def responses_routes(fake: FakeReplica) -> None:
    """The Responses API on `fake`'s app: its answers carry ids, kept in its own store."""
    app = fake.app

    @app.post("/v1/responses")
    async def create(request: Request) -> Response:
        fake.response_calls += 1
        fake.last_headers = dict(request.headers)
        fake.last_body = await request.body()
        body = json.loads(fake.last_body)
        previous = body.get("previous_response_id")
        if previous is not None and previous not in fake.stored:
            error = {
                "message": f"Previous response with id {previous!r} not found.",
                "type": "invalid_request_error",
                "param": "previous_response_id",
                "code": "previous_response_not_found",
            }
            return JSONResponse({"error": error}, 400)
        response = {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "status": "completed",
            "model": fake.base,
            "output": [{"type": "message", "role": "assistant", "content": []}],
            "previous_response_id": previous,
        }
        if fake.completion_tokens is not None:  # before the echoed settings, as engines answer
            n = fake.completion_tokens
            response["usage"] = {"input_tokens": 1, "output_tokens": n, "total_tokens": n + 1}
        response["instructions"] = body.get("instructions")
        fake.stored[response["id"]] = response
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(_response_events(fake, response), media_type="text/event-stream")

    @app.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str, request: Request) -> Response:
        fake.last_headers = dict(request.headers)
        if response_id not in fake.stored:
            return _not_found(response_id)
        return JSONResponse(fake.stored[response_id])

    @app.delete("/v1/responses/{response_id}")
    async def delete(response_id: str) -> Response:
        if fake.stored.pop(response_id, None) is None:
            return _not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})

    @app.get("/v1/responses/{response_id}/input_items")
    async def input_items(response_id: str, request: Request) -> Response:
        fake.last_query = request.url.query
        if response_id not in fake.stored:
            return _not_found(response_id)
        return JSONResponse({"object": "list", "data": [], "has_more": False})


async def _response_events(fake: FakeReplica, response: dict[str, Any]) -> AsyncIterator[str]:
    try:
        created = {"type": "response.created", "sequence_number": 0, "response": response}
        yield f"event: response.created\ndata: {json.dumps(created)}\n\n"
        while fake.stream_gate is not None and not fake.stream_gate.is_set():
            await asyncio.sleep(0.02)
        delta = {"type": "response.output_text.delta", "sequence_number": 1, "delta": "hi"}
        yield f"event: response.output_text.delta\ndata: {json.dumps(delta)}\n\n"
        done = {"type": "response.completed", "sequence_number": 2, "response": response}
        yield f"event: response.completed\ndata: {json.dumps(done)}\n\n"
    except asyncio.CancelledError:
        fake.stream_cancelled.set()
        raise


def _not_found(response_id: str) -> Response:
    error = {
        "message": f"Response with id {response_id!r} not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": None,
    }
    return JSONResponse({"error": error}, 404)
