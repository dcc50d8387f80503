"""`pagedock serve`: load the model, start the engine loop, serve HTTP until SIGTERM has drained.

The engine loop runs on this process's main thread and uvicorn's event loop on a second thread:
torch's OpenMP regions are measurably slower when entered from a non-main thread (see
engine/runtime/async_engine.py), the step's heavy work is kernels that release the GIL, and a
process of its own would add a pickle round trip of every step's outputs. Signals arrive on the
main thread, so the handlers installed here hand them to the server's drain (uvicorn installs none
off the main thread).
"""

from __future__ import annotations

import concurrent.futures
import gc
import logging
import signal
import threading
import uuid
from importlib import import_module
from typing import Any

import uvicorn
from fastapi import FastAPI

from engine.config import EngineConfig
from engine.kernels.cpu_kernels import set_cpu_kernels_cache
from engine.loader.weights_load_strategy import set_weights_load_strategy
from engine.runtime.async_engine import AsyncEngine
from engine.runtime.llm_engine import LLMEngine
from engine.server.app import build_app
from engine.server.drain import GRACEFUL_SHUTDOWN_S, DrainingServer, drain
from engine.server.kv_events.ndjson_stream import KVEventHub
from engine.server.kv_events.vllm_publisher import VllmKVPublisher
from engine.server.metrics import EngineMetrics
from engine.server.openai.context import ServerContext, ServerOptions
from engine.server.request_log import RequestLog
from engine.server.request_tracer import RequestTracer
from engine.server.tenancy.tenant_resolver import TenantResolver
from engine.startup_stages import mark_stage
from engine.structured_outputs.grammar_compiler import DEFAULT_COMPILE_TIMEOUT_S
from engine.worker.huge_pages import set_kv_cache_prefault
from pagedock.errors import TensorParallelError
from pagedock.http.limits import limited_protocol
from pagedock.logs import configure_logging
from pagedock.responses_store.store import open_responses_store
from pagedock.tenancy.quota_store import open_quota_store
from pagedock.tracing.tracer import Tracing, start_tracing

logger = logging.getLogger("pagedock.server")


def build_context(
    engine: LLMEngine, options: ServerOptions, own_thread: bool = True
) -> ServerContext:
    max_loras = engine.config.max_loras if engine.config.enable_lora else 0
    metrics = EngineMetrics(engine.served_model_name, max_loras)
    metrics.set_cache_config(
        engine.config.block_size, engine.num_kv_blocks, engine.config.enable_prefix_caching
    )
    tenants = TenantResolver(
        engine.config.tenant_table(),
        options.api_key,
        options.internal_api_key,
        engine.config.tenant_header,
    )
    metrics.tenants.set_known_priorities(tenants.known_priorities())
    max_waiting = options.max_waiting if options.max_waiting and options.max_waiting > 0 else None
    async_engine = AsyncEngine(engine, max_waiting, own_thread)
    tracing = _add_listeners(async_engine, engine.served_model_name, options, metrics)
    return ServerContext(
        tracing=tracing,
        kv_publisher=_kv_publisher(async_engine, options),
        engine=async_engine,
        metrics=metrics,
        kv_hub=KVEventHub(
            async_engine,
            uuid.uuid4().hex,
            engine.root_hash,
            max_consumers=options.max_kv_event_subscribers,
        ),
        tokenizer=engine.tokenizer,
        served_model_name=engine.served_model_name,
        model_root=str(engine.model_path),
        max_model_len=engine.max_model_len,
        options=options,
        tenants=tenants,
        allow_runtime_lora_updating=engine.config.allow_runtime_lora_updating,
        loras=engine.loras.registry,
        quotas=open_quota_store(options.quota_store),
        responses_store=open_responses_store(
            options.responses_store,
            options.responses_store_ttl_s,
            options.responses_store_max_entries,
        ),
    )


def _add_listeners(
    async_engine: AsyncEngine, model: str, options: ServerOptions, metrics: EngineMetrics
) -> Tracing | None:
    """What watches the engine's steps: the metrics, the request log, the tracer (when tracing
    is on: returned, to be shut down with the server)."""
    async_engine.add_stats_listener(metrics.observe_stats)
    async_engine.add_output_listener(metrics.observe_outputs)
    async_engine.add_output_listener(RequestLog(options.log_prompts).on_outputs)
    tracing = start_tracing("pagedock-engine", options.otlp_traces_endpoint)
    if tracing is not None:
        async_engine.add_output_listener(RequestTracer(tracing.tracer, model).on_outputs)
    return tracing


def _kv_publisher(async_engine: AsyncEngine, options: ServerOptions) -> VllmKVPublisher | None:
    kv_events = options.kv_events()
    if kv_events is None or not kv_events.enabled:
        return None
    kv_publisher = VllmKVPublisher(kv_events)
    async_engine.add_kv_listener(kv_publisher.on_batches)
    logger.info("publishing vLLM-format KV events on %s (replay: %s)", *kv_publisher.endpoints)
    return kv_publisher


def wait_for_grammar_compiler(warm_up: concurrent.futures.Future[Any] | None) -> None:
    """Wait for the grammar compiler's warm-up, so that no guided request meets its cost while
    others are served; a failure is the first guided request's to report, not the server's."""
    if warm_up is None:
        return
    try:
        warm_up.result(timeout=DEFAULT_COMPILE_TIMEOUT_S)
    except Exception as e:  # a tokenizer xgrammar can't read: guided requests will say so
        logger.warning("the structured-outputs grammar compiler did not warm up: %s", e)


def freeze_startup_heap() -> None:
    """Move everything built so far (the model, the tokenizer, the app: hundreds of thousands of
    objects that live as long as the process) out of the cyclic collector's reach, so that a full
    collection while serving scans only what requests allocate. One server per process, so
    nothing frozen here is ever garbage; vLLM's engine does the same."""
    gc.collect()
    gc.freeze()


def load_engine(config: EngineConfig) -> LLMEngine:
    """The engine, with xgrammar's import (the grammar warm-up's first half) on a thread of its
    own beside the weights' loading, which mostly runs in torch's kernels without the GIL.

    NOTE: an engine that fails to load (a model that won't split, a missing file) returns to the
    caller only once that import is over. `pagedock serve` in-process (the CLI tests) would
    otherwise go on importing transformers, which xgrammar imports, while the caller's next
    import of it runs: transformers' lazy module is not safe to import from two threads, and
    one of them got "cannot import name 'LlamaConfig'" or "'PreTrainedTokenizerBase'"."""
    importing = threading.Thread(
        target=import_module, args=("xgrammar",), name="pagedock-import-xgrammar", daemon=True
    )
    importing.start()
    try:
        return LLMEngine(config)
    except BaseException:
        importing.join()
        raise


def run_server(config: EngineConfig, options: ServerOptions) -> int:
    configure_logging(options.log_level, options.log_format)
    set_cpu_kernels_cache(config.cpu_kernels_cache)
    set_weights_load_strategy(config.weights_load_strategy)
    set_kv_cache_prefault(config.kv_cache_prefault)
    engine = load_engine(config)
    grammar = engine.guided.warm_up()  # on its pool, while the app is built
    ctx = build_context(engine, options, own_thread=False)
    uv_config = build_uvicorn_config(build_app(ctx), options)
    wait_for_grammar_compiler(grammar)
    freeze_startup_heap()
    mark_stage("warmup_done")
    server = DrainingServer(uv_config, drain=lambda: drain(ctx), on_ready=lambda: _on_ready(ctx))

    def serve_http() -> None:
        try:
            server.run()
        finally:  # a forced exit skips the app's shutdown: stop the engine loop from here too
            ctx.engine.request_stop()

    http = threading.Thread(target=serve_http, name="pagedock-http")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, server.handle_exit)
    http.start()
    # Returns once the app's shutdown stopped the engine loop (or at once if it never started).
    ctx.engine.run_on_this_thread(keep_waiting=http.is_alive)
    lost_rank = isinstance(ctx.engine.loop_error, TensorParallelError)
    if lost_rank:
        # NOTE: a lost rank does not come back: end the process (a non-zero exit, so its
        # supervisor restarts it) rather than answer 503 for ever. /health is 503 meanwhile.
        logger.error("a tensor-parallel rank is gone; exiting: %s", ctx.engine.loop_error)
        server.should_exit = True
    http.join()
    engine.shutdown()
    return 0 if server.started and not lost_rank else 1


def build_uvicorn_config(app: FastAPI, options: ServerOptions) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_config=None,  # our logging setup, not uvicorn's
        log_level=options.log_level,
        access_log=False,  # the per-request log line says more
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,  # once the drain is over
        timeout_keep_alive=options.keep_alive_timeout_s,
        # The read deadline, and the connection cap answered with OpenAI's 503 (not uvicorn's).
        http=limited_protocol(options.request_read_timeout_s, options.max_connections),
    )


def _on_ready(ctx: ServerContext) -> None:
    mark_stage("ready")
    _print_ready(ctx)


def _print_ready(ctx: ServerContext) -> None:
    o = ctx.options
    base = f"http://{o.host}:{o.port}"
    auth = " -H 'Authorization: Bearer $PAGEDOCK_API_KEY'" if o.api_key else ""
    if not o.api_key and ctx.tenants.table is not None:
        auth = " -H 'Authorization: Bearer <a tenant key>'"
    print(
        f"pagedock: serving {ctx.served_model_name} on {base} (max_model_len "
        f"{ctx.max_model_len}). Try:\n"
        f"  curl {base}/v1/chat/completions{auth} -H 'Content-Type: application/json' "
        f'-d \'{{"messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 32}}\'',
        flush=True,
    )
