"""`pagedock serve`: load the model, start the engine loop, serve HTTP until SIGTERM has drained.

The engine loop runs on a thread of this process, not in a process of its own: on 2 cores the
measured online throughput stays within a few percent of the offline engine (docs/server.md), the
step's heavy work is torch kernels that release the GIL, and a process would add a pickle round
trip of every step's outputs.
"""

from __future__ import annotations

import logging
import uuid

import uvicorn

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.kv_events_stream import KVEventHub
from engine.llm_engine import LLMEngine
from engine.metrics import EngineMetrics
from engine.server.app import build_app
from engine.server.context import ServerContext, ServerOptions
from engine.server.drain import DrainingServer, drain

logger = logging.getLogger("pagedock.server")
# Seconds uvicorn waits for open connections once the drain is over.
_GRACEFUL_SHUTDOWN_S = 5


def build_context(engine: LLMEngine, options: ServerOptions) -> ServerContext:
    metrics = EngineMetrics(engine.served_model_name)
    max_waiting = options.max_waiting if options.max_waiting and options.max_waiting > 0 else None
    async_engine = AsyncEngine(engine, max_waiting, metrics, options.log_prompts)
    return ServerContext(
        engine=async_engine,
        metrics=metrics,
        kv_hub=KVEventHub(async_engine, instance_id=uuid.uuid4().hex),
        tokenizer=engine.tokenizer,
        served_model_name=engine.served_model_name,
        model_root=str(engine.model_path),
        max_model_len=engine.max_model_len,
        options=options,
    )


def run_server(config: EngineConfig, options: ServerOptions) -> int:
    configure_logging(options.log_level)
    engine = LLMEngine(config)
    ctx = build_context(engine, options)
    uv_config = uvicorn.Config(
        build_app(ctx),
        host=options.host,
        port=options.port,
        log_config=None,  # our logging setup, not uvicorn's
        log_level=options.log_level,
        access_log=False,  # the per-request log line says more
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
    )
    server = DrainingServer(uv_config, drain=lambda: drain(ctx), on_ready=lambda: _print_ready(ctx))
    server.run()
    return 0 if server.started else 1


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def _print_ready(ctx: ServerContext) -> None:
    o = ctx.options
    base = f"http://{o.host}:{o.port}"
    auth = " -H 'Authorization: Bearer $PAGEDOCK_API_KEY'" if o.api_key else ""
    print(
        f"pagedock: serving {ctx.served_model_name} on {base} (max_model_len "
        f"{ctx.max_model_len}). Try:\n"
        f"  curl {base}/v1/chat/completions{auth} -H 'Content-Type: application/json' "
        f'-d \'{{"messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 32}}\'',
        flush=True,
    )
