"""ServerContext: what every route needs, built once per server (no globals, so tests can run
several servers in one process)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.lora.adapter_registry import LoRARegistry
from engine.server.tenancy.tenant_resolver import TenantResolver
from engine.tool_calls import get_tool_call_parser
from pagedock.errors import ConfigError
from pagedock.http.validation_process import ValidationProcess
from pagedock.kv.vllm_events import KVEventsConfig
from pagedock.limits import MAX_BODY_BYTES
from pagedock.logs import check_log_format
from pagedock.options import option_meta
from pagedock.responses_store.memory_store import MemoryResponsesStore
from pagedock.responses_store.store import MEMORY, ResponsesStore, check_store_url
from pagedock.tenancy.quota_store import MemoryQuotaStore, QuotaStore, check_quota_store_url
from pagedock.tracing.tracer import Tracing
from pagedock.tracing.tracing_config import traces_endpoint

# Threads that render and tokenize prompts: a few, so huge prompts queue here rather than take
# every thread of the default executor.
PROMPT_POOL_WORKERS = 2

if TYPE_CHECKING:
    from engine.runtime.async_engine import AsyncEngine
    from engine.server.kv_events.ndjson_stream import KVEventHub
    from engine.server.kv_events.vllm_publisher import VllmKVPublisher
    from engine.server.metrics import EngineMetrics
    from pagedock.text.tokenizer import Tokenizer


@dataclass
class ServerOptions:
    """The server's own settings (the engine's are EngineConfig); CLI flags mirror the names."""

    host: str = "127.0.0.1"
    """Address to listen on; 0.0.0.0 in a container."""
    port: int = 8000
    """TCP port."""
    api_key: str | None = None
    """When set, every route but /health, /metrics and /version needs
    `Authorization: Bearer KEY`."""
    internal_api_key: str | None = None
    """The fleet's internal key (docs/server.md#the-internal-key): when set, a body with
    `continuation` and GET /v1/kv/events need it in the x-pagedock-internal-key header, which only
    the routers send; unset, both are open to whoever --api-key lets in."""
    max_waiting: int | None = 1024
    """Requests allowed to wait for a batch slot; beyond it, 429 with Retry-After. 0 = no limit."""
    drain_timeout: float = 30.0
    """Seconds SIGTERM waits for in-flight requests before aborting them."""
    max_body_bytes: int = MAX_BODY_BYTES
    """Largest request body accepted (413 beyond); the router's limit is the default."""
    log_level: str = "info"
    """debug, info, warning or error."""
    otlp_traces_endpoint: str | None = None
    """Export each request's spans (OpenTelemetry, OTLP over HTTP) to this URL, as vLLM's flag;
    the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables turn it on too, OTEL_SDK_DISABLED
    off. Off by default (docs/observability.md#traces)."""
    log_format: str = "text"
    """text (a line a person reads) or json (one JSON object a line, with the request's
    x_request_id and W3C trace_id: docs/server.md#logs)."""
    log_prompts: bool = False
    """Put prompt text in the per-request log line (debugging only: prompts are user data)."""
    max_connections: int = 2048
    """Open HTTP connections allowed at once; beyond it, 503 at once. 0 = no limit."""
    max_kv_event_subscribers: int = 16
    """Open GET /v1/kv/events streams allowed at once (one per router is the need); beyond it,
    503 at once, so idle subscribers can't hold the connections requests need. 0 = no limit."""
    keep_alive_timeout_s: int = 5
    """Seconds an idle keep-alive connection stays open."""
    stall_timeout_s: float = 60.0
    """`/health` answers 503 when the engine loop has not gone round for this many seconds (a hung
    step), so the liveness probe restarts the pod and routers stop sending to it. The slowest
    legitimate step, a 2,048-token prefill, takes seconds on a CPU; raise it for large models on
    slow CPUs. 0 turns the check off."""
    request_read_timeout_s: float = 30.0
    """Seconds a client has to send a whole request (headers and body) from its first byte, and a
    new connection its first byte; a slower one is disconnected (slowloris, idle sockets)."""
    tool_call_parser: str | None = None
    """How tool calls are read out of generated text with `tool_choice: auto`: hermes
    (<tool_call> tags; the built-in model's) or llama3_json. docs/tool-calling.md."""
    enable_auto_tool_choice: bool = False
    """Let the model decide whether to call a tool (`tool_choice: auto`, the default when a
    request has tools); needs --tool-call-parser. Without it such requests get a 400, as in vLLM."""
    kv_events_config: str | None = None
    """vLLM's --kv-events-config JSON, e.g. '{"enable_kv_cache_events": true, "publisher": "zmq",
    "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv@10.0.0.5:8000@m"}':
    publish KV events in vLLM's ZMQ wire format for llm-d, Dynamo and other vLLM-event consumers
    (plus "event_encoding": "array" for the older positional form). The events carry raw prompt
    token ids on an unauthenticated port: expose it only to routers. None = off."""
    responses_store: str = field(default=MEMORY, metadata=option_meta(metavar="memory|URL"))
    """Where /v1/responses keeps `store: true` responses, which `previous_response_id` continues
    (docs/responses.md): memory (this process only) or a redis://host:port/db URL (rediss://,
    unix:// too) that every engine of a fleet shares, so a follow-up works on any replica."""
    responses_store_ttl_s: int = 86400
    """Seconds a stored response is kept after it was stored; 0 keeps it until deleted (or, in
    memory, evicted)."""
    responses_store_max_entries: int = 10000
    """Responses the memory store holds at most; beyond it the least recently used goes."""
    quota_store: str = field(default=MEMORY, metadata=option_meta(metavar="memory|URL"))
    """Where tenants' quotas are counted: memory (this server's own counts) or a
    redis://host:port/db URL that every engine (or router) of a fleet shares."""

    def __post_init__(self) -> None:
        if self.max_kv_event_subscribers < 0:
            raise ConfigError(
                f"--max-kv-event-subscribers must be 0 (no limit) or more, got "
                f"{self.max_kv_event_subscribers}"
            )
        if self.internal_api_key == "":
            raise ConfigError("--internal-api-key is empty: set a random key, or leave it unset")
        if self.tool_call_parser:
            get_tool_call_parser(self.tool_call_parser)  # ConfigError naming the choices
        elif self.enable_auto_tool_choice:
            raise ConfigError("--enable-auto-tool-choice needs --tool-call-parser")
        self.kv_events()  # a bad --kv-events-config fails before the model loads
        check_log_format(self.log_format)
        traces_endpoint(self.otlp_traces_endpoint)  # a bad URL stops the server at start
        check_store_url(self.responses_store)
        check_quota_store_url(self.quota_store)
        if self.responses_store_ttl_s < 0:
            raise ConfigError(
                f"--responses-store-ttl-s must be 0 (no expiry) or more, got "
                f"{self.responses_store_ttl_s}"
            )
        if self.responses_store_max_entries < 1:
            raise ConfigError(
                f"--responses-store-max-entries must be 1 or more, got "
                f"{self.responses_store_max_entries}"
            )

    def kv_events(self) -> KVEventsConfig | None:
        return KVEventsConfig.from_json(self.kv_events_config) if self.kv_events_config else None


@dataclass
class ServerContext:
    engine: AsyncEngine
    metrics: EngineMetrics
    kv_hub: KVEventHub
    tokenizer: Tokenizer | None
    served_model_name: str
    model_root: str
    max_model_len: int
    options: ServerOptions
    tenants: TenantResolver = field(default_factory=lambda: TenantResolver(None))
    """Who each request belongs to and the priority it runs at (engine/server/tenancy/);
    build_context makes it from the server's settings (the default: no tenants file)."""
    draining: bool = False
    handing_off: bool = False
    """True from the drain deadline: resumable streams aborted now are handed off
    (engine/server/openai/handoff.py)."""
    kv_publisher: VllmKVPublisher | None = None
    """vLLM-format KV events on ZMQ (--kv-events-config); None when off."""
    allow_runtime_lora_updating: bool = False
    """Serve vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter (EngineConfig's field)."""
    loras: LoRARegistry = field(default_factory=LoRARegistry)
    """The LoRA adapters the engine serves (the engine's registry, readable from any thread):
    what a request's `model` may name besides the base model."""
    prompt_pool: ThreadPoolExecutor = field(default_factory=lambda: _new_prompt_pool())
    validation_process: ValidationProcess = field(default_factory=ValidationProcess)
    """Validates large request bodies off this process's GIL (engine/server/large_body_route.py)."""
    quotas: QuotaStore = field(default_factory=MemoryQuotaStore)
    """Each tenant's live counts against its quotas (engine/server/tenancy/); build_context
    opens the store --quota-store names."""
    tracing: Tracing | None = None
    """Where spans go (--otlp-traces-endpoint); None: tracing is off."""
    responses_store: ResponsesStore = field(
        default_factory=lambda: MemoryResponsesStore(ServerOptions.responses_store_max_entries)
    )
    """Stored /v1/responses responses (--responses-store); build_context opens the one the
    options name."""


def _new_prompt_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(PROMPT_POOL_WORKERS, thread_name_prefix="pagedock-prompt")
