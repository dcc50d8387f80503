"""FakeReplica: an engine stand-in on loopback whose answers a test scripts (failures included),
and an in-process server thread for it or for the router app."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

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


class FakeReplica:
    """`mode` scripts the replica: ok | stream | break | slow | bad | unavailable (503 draining) |
    dead (503 engine_dead) | poison (500 engine_error: this request failed) | inf_load (answers ok,
    reports +Inf and NaN load in /metrics) | locked (answers ok, refuses the KV events with 401) |
    hang (never answers a completion). Setting `frozen` stops it as SIGSTOP would (health checks,
    requests and streams all hang); setting `health_down` fails only its health checks (503)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.calls = 0
        self.last_headers: dict[str, str] = {}
        self.stream_cancelled = threading.Event()
        self.frozen = threading.Event()
        self.health_down = threading.Event()
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI()
        instance = uuid.uuid4().hex

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            self.calls += 1
            self.last_headers = dict(request.headers)
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
                return JSONResponse(
                    {
                        "id": "cmpl-1",
                        "object": "text_completion",
                        "created": 0,
                        "model": "fake",
                        "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
                    }
                )
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
            return Response('vllm:num_requests_running{model_name="fake"} 0.0\n')

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
