"""RouterConfig: every setting of the router, validated at construction.

CLI flags (`pagedock route --health-interval-s 1`) and `PAGEDOCK_*` env vars mirror the field
names. The cost model's constants live here too, so a policy is a pure function of its inputs and
this config (docs/router.md explains each constant).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from pagedock.errors import ConfigError
from pagedock.limits import (
    BLOCK_SIZES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MODEL,
    MAX_BODY_BYTES,
    MIN_BODY_BUDGET_BYTES,
    ROUTING_POLICIES,
)
from pagedock.options import option_meta
from router.flow_config import FlowConfig
from router.picker_config import PickerConfig
from router.replica_urls import normalize_url, vllm_replica
from router.responses_config import ResponsesConfig

DISCOVERIES = ("static", "k8s")
REPLICA_KINDS = ("pagedock", "vllm")


@dataclass
class RouterConfig(PickerConfig, FlowConfig, ResponsesConfig):
    replicas: list[str] = field(
        default_factory=list, metadata=option_meta(flag="--replica", metavar="URL")
    )
    """Engine base URLs for static discovery (repeat --replica), e.g. http://10.0.0.5:8000."""
    discovery: str = "static"
    """static (the --replica list) or k8s (the EndpointSlices of --service in --namespace)."""
    service: str | None = None
    """k8s discovery: the engines' (headless) Service whose EndpointSlices list the replicas."""
    namespace: str = "default"
    """k8s discovery: the namespace of --service."""
    target_port: str | None = None
    """k8s discovery: the EndpointSlice port name or number to use; None = `http`, else the
    first."""
    policy: str = "prefix-aware"
    """prefix-aware, round-robin, least-loaded or session."""
    model: str | None = DEFAULT_MODEL
    """The tokenizer source, resolved as the engine resolves models (built-in name, .gguf, HF dir);
    empty = no tokenizer (prefix-aware then balances by load only)."""
    chat_template: str | None = None
    """The engines' --chat-template (a file path or the template itself), so that chats are
    rendered, and their blocks hashed, as the engines render them; None = as the engine's
    default."""
    host: str = "127.0.0.1"
    """Address to listen on; 0.0.0.0 in a container."""
    port: int = 8080
    """TCP port."""
    root_path: str = ""
    """A URL path prefix the router also serves under (an Ingress path such as /llm), so
    /llm/v1/models is /v1/models; empty = none."""
    max_connections: int = 2048
    """Open client connections allowed at once; beyond it, 503 at once. 0 = no limit."""
    keep_alive_timeout_s: int = 5
    """Seconds an idle client keep-alive connection stays open."""
    request_read_timeout_s: float = 30.0
    """Seconds a client has to send a whole request (headers and body) from its first byte, and a
    new connection its first byte; a slower one is disconnected (slowloris, idle sockets)."""
    block_size: int = DEFAULT_BLOCK_SIZE
    """Tokens per KV block (as the engines' --block-size) until a replica's snapshot says
    otherwise (the snapshot wins)."""
    api_key: str | None = None
    """When set, the API routes need `Authorization: Bearer KEY` (the header is forwarded)."""
    replica_api_key: str | None = None
    """Bearer key the router sends to replicas that need one (default: the client's header)."""
    internal_api_key: str | None = None
    """The engines' --internal-api-key, sent on continuations and KV event subscriptions only."""
    cache_salt_by_tenant: bool | None = None
    """Forward every request with a `cache_salt` derived from the bearer key its client presents,
    so tenants never share prefix-cache blocks (docs/router.md); None = on when --api-key is set."""
    predicted_cached_tokens_header: bool = False
    """Answer with x-pagedock-predicted-cached-tokens (benchmarks, tests): it tells a client how
    much of its prompt a replica holds, so never on a router tenants share."""
    session_header: str = "x-session-id"
    """session policy: the header whose value pins a client to a replica (else the `user` field)."""
    seed: int = 0
    """Seed of the tie-breaking RNG (power of two choices), so a run can be replayed."""
    health_interval_s: float = 1.0
    """Seconds between active health checks (and load scrapes) of each replica."""
    health_timeout_s: float = 1.0
    """Seconds a health check or load scrape may take before the replica counts as failed."""
    max_attempts: int = 3
    """Replicas tried per request before giving up (connect errors, failure before the first
    byte)."""
    connect_timeout_s: float = 2.0
    """Seconds to open a connection to a replica."""
    stall_eject_s: float = 5.0
    """Seconds a request may wait without a byte from a replica that has left the healthy set
    (stopped, hung, partitioned) before it is taken from it: retried on another replica before
    its first byte, ended with an error event after it (router/replicas/stall_watch.py)."""
    max_stream_resumes: int = 2
    """Times one stream whose replica fails after its first byte (dies, hangs, cuts the
    connection) is resumed on another replica as a continuation, in the same client stream
    (docs/router.md); 0 = end such a stream with an error event."""
    request_timeout_s: float = 600.0
    """Seconds a replica may take to answer (and between two streamed chunks)."""
    event_backoff_min_s: float = 0.05
    """First delay before resubscribing to a replica's KV event stream; doubles per failure."""
    event_backoff_max_s: float = 2.0
    """Longest delay between resubscription attempts."""
    max_hash_bytes: int = 262_144
    """Request bodies larger than this are routed by load alone, their prompt not tokenized:
    cache affinity for a quarter megabyte of prompt is not worth holding up other requests."""
    max_snapshot_blocks: int = 1_048_576
    """Largest KV snapshot (in blocks) taken from one replica; a larger one turns prefix affinity
    off for that replica (shown as its kv_error), since holding it would cost the router memory."""
    pending_prefix_ttl_s: float = 2.0
    """Seconds a routed request's blocks count as cached on its replica before the replica's own
    stored event confirms them (a burst of one tenant's requests lands together)."""
    prefill_ms_per_token: float = 0.1
    """Cost model: milliseconds one replica needs per prefill token (queued or uncached)."""
    running_request_tokens: int = 16
    """Cost model: prefill-token equivalents one running (decoding) request adds to the queue."""
    waiting_request_tokens: int = 256
    """Cost model: prefill tokens assumed per waiting request a replica reports in /metrics."""
    tie_tolerance_ms: float = 5.0
    """Cost model: estimates within this many ms of the best tie (broken by power of two
    choices)."""
    balance_abs_threshold_tokens: int = 2048
    """Imbalance guard: the affine choice is overruled by the least-loaded replica when its queue
    exceeds the shortest by more than this many tokens ..."""
    balance_rel_threshold: float = 4.0
    """... and by more than this factor."""
    kv_usage_threshold: float = 0.95
    """Replicas whose KV cache is fuller than this are chosen only when every replica is."""
    lora_load_ms: float = 20.0
    """Cost model: milliseconds added for a request for a LoRA adapter on a replica that serves it
    but has it neither running nor waiting (vllm:lora_requests_info), so may have to load it into
    a weight slot first (or wait for one); 0 = adapter residency is ignored."""
    replica_kind: str = "pagedock"
    """pagedock (KV events from GET /v1/kv/events, with snapshots) or vllm (vLLM's ZMQ KV events,
    --kv-events-port / --kv-replay-port on each replica's host) for every replica."""
    vllm_replicas: list[str] = field(
        default_factory=list, metadata=option_meta(flag="--vllm-replica", metavar="URL")
    )
    """Static discovery: replicas that publish vLLM's ZMQ KV events, whatever --replica-kind says
    (repeat the flag; a mixed fleet lists its pagedock engines with --replica). `URL@PORT:PORT`
    names the replica's own event and replay ports (several replicas on one host); plain `URL`
    uses --kv-events-port and --kv-replay-port."""
    kv_events_port: int = 5557
    """vllm replicas: the port of their KV event PUB socket (vLLM's --kv-events-config endpoint)."""
    kv_replay_port: int = 5558
    """vllm replicas: the port of their replay ROUTER socket (replay_endpoint); 0 = none."""
    kv_events_topic: str = ""
    """vllm replicas: the topic prefix to subscribe to; empty = every topic."""
    kv_replay_timeout_s: float = 5.0
    """vllm replicas: seconds a replay may take before the batches it lacks count as missed."""
    picker_port: int | None = None
    """Endpoint-picker mode: serve Envoy's ext_proc protocol over gRPC on this port (the Gateway
    API Inference Extension's endpoint picker, docs/gateway-api.md); unset = off."""
    picker_shed_ttft_ms: float = 0.0
    """Endpoint picker: answer 429 when even the best eligible replica's estimated time to first
    token (the cost model's) exceeds this many ms; 0 = never shed."""
    hold_queue_size: int = 256
    """Requests held (in arrival order) while no replica is ready, e.g. scaled to zero; beyond
    it, 503 with Retry-After at once. 0 = none held: 503 at once."""
    hold_timeout_s: float = 60.0
    """Seconds a held request waits for a ready replica before its 503 with Retry-After."""
    hold_queue_bytes: int = 128 * 1024 * 1024
    """Bytes of request bodies held at most (beside --hold-queue-size); a body past it gets a 503
    at once. Half of --max-buffered-body-bytes: held bodies leave room for those under way."""
    max_buffered_body_bytes: int = 256 * 1024 * 1024
    """Bytes of request bodies the router keeps at once (held, parsed, forwarded); a body past it
    gets a 503 at once, before it is parsed. 256 MiB fits a 512Mi pod: ~75 MiB of router and two
    8 MiB bodies parsing at once (up to ~80 MiB each) beside it. At least 8 MiB (a whole body)."""
    warm_prefixes: int = 8
    """Hottest prompt prefixes a replica that joins while others serve is sent (one-token
    completions) before it takes its share; 0 = no warm start."""
    warm_timeout_s: float = 30.0
    """Longest time warming may hold a new replica back."""
    hot_prefix_entries: int = 256
    """Prompt prefixes (token ids) the router keeps to warm new replicas with."""

    def __post_init__(self) -> None:
        self.replicas = [normalize_url(u) for u in self.replicas]
        self.replicas += [u for u in self.vllm_ports if u not in self.replicas]
        self.root_path = self.root_path.rstrip("/")
        if self.model is not None and not self.model.strip():
            self.model = None
        self._check_replicas()
        self._check_client_side()
        self._check_routing()
        self._check_hold_and_warm()
        self._check_picker()
        self._check_picker_limits()
        self._check_flow()
        self._check_response_owners()
        self._check_keys()

    def _check_replicas(self) -> None:
        """Where the replicas come from, and how their KV events are read."""
        _check(
            self.replica_kind in REPLICA_KINDS,
            f"replica_kind must be one of {REPLICA_KINDS}, got {self.replica_kind!r}",
        )
        _check(
            0 < self.kv_events_port < 65536,
            f"kv_events_port must be a TCP port, got {self.kv_events_port}",
        )
        _check(
            0 <= self.kv_replay_port < 65536,
            f"kv_replay_port must be a TCP port or 0, got {self.kv_replay_port}",
        )
        _check(self.kv_replay_timeout_s > 0, "kv_replay_timeout_s must be positive")
        _check(
            self.discovery in DISCOVERIES,
            f"discovery must be one of {DISCOVERIES}, got {self.discovery!r}",
        )
        _check(self.discovery != "k8s" or bool(self.service), "k8s discovery needs --service")
        _check(self.max_snapshot_blocks >= 1, "max_snapshot_blocks must be at least 1")
        _check(
            self.discovery != "static" or bool(self.replicas),
            "static discovery needs at least one --replica URL",
        )

    def _check_client_side(self) -> None:
        """What the router serves its clients under, and how long it waits for them."""
        _check(
            not self.root_path or self.root_path.startswith("/"),
            f"root_path must start with /, got {self.root_path!r}",
        )
        _check(
            self.max_connections >= 0,
            f"max_connections must be 0 (no limit) or more, got {self.max_connections}",
        )
        _check(
            self.keep_alive_timeout_s > 0,
            f"keep_alive_timeout_s must be positive, got {self.keep_alive_timeout_s}",
        )
        _check(
            self.request_read_timeout_s > 0,
            f"request_read_timeout_s must be positive, got {self.request_read_timeout_s}",
        )

    def _check_routing(self) -> None:
        """The policy, its cost model, and how a request is tried on the replicas."""
        _check(
            self.policy in ROUTING_POLICIES,
            f"policy must be one of {ROUTING_POLICIES}, got {self.policy!r}",
        )
        _check(self.max_attempts >= 1, f"max_attempts must be at least 1, got {self.max_attempts}")
        _check(
            self.max_stream_resumes >= 0,
            f"max_stream_resumes must be 0 or more, got {self.max_stream_resumes}",
        )
        _check(
            self.block_size in BLOCK_SIZES,
            f"block_size must be one of {BLOCK_SIZES}, got {self.block_size}",
        )
        for name in (
            "health_interval_s",
            "health_timeout_s",
            "connect_timeout_s",
            "request_timeout_s",
            "stall_eject_s",
            "prefill_ms_per_token",
        ):
            _check(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        _check(self.balance_rel_threshold >= 1.0, "balance_rel_threshold must be at least 1")
        _check(0.0 < self.kv_usage_threshold <= 1.0, "kv_usage_threshold must be in (0, 1]")
        _check(self.lora_load_ms >= 0, f"lora_load_ms must be 0 or more, got {self.lora_load_ms}")

    def _check_hold_and_warm(self) -> None:
        """Requests held while no replica is ready; replicas warmed before they take a share."""
        _check(
            self.hold_queue_size >= 0,
            f"hold_queue_size must be 0 or more, got {self.hold_queue_size}",
        )
        _check(
            self.warm_prefixes >= 0 and self.hot_prefix_entries >= 0,
            "warm_prefixes and hot_prefix_entries must be 0 or more",
        )
        _check(
            self.warm_timeout_s > 0, f"warm_timeout_s must be positive, got {self.warm_timeout_s}"
        )
        _check(
            self.hold_timeout_s > 0, f"hold_timeout_s must be positive, got {self.hold_timeout_s}"
        )
        _check(self.hold_queue_bytes >= 0, "hold_queue_bytes must be 0 or more")
        _check(
            self.max_buffered_body_bytes >= MIN_BODY_BUDGET_BYTES,
            f"max_buffered_body_bytes must be at least {MIN_BODY_BUDGET_BYTES}: a body of "
            f"{MAX_BODY_BYTES} bytes (the largest taken) beside the small bodies' reserve",
        )

    def _check_picker(self) -> None:
        """Endpoint-picker mode (docs/gateway-api.md)."""
        _check(
            self.picker_port is None or 1 <= self.picker_port <= 65535,
            f"picker_port must be in 1..65535, got {self.picker_port}",
        )
        _check(
            self.picker_port is None or self.picker_port != self.port,
            f"picker_port must differ from port ({self.port})",
        )
        _check(
            self.picker_shed_ttft_ms >= 0,
            f"picker_shed_ttft_ms must be 0 (never shed) or more, got {self.picker_shed_ttft_ms}",
        )

    def _check_keys(self) -> None:
        # A router that adds the replicas' key for every client would open key-protected engines
        # to keyless clients.
        _check(
            self.replica_api_key is None or self.api_key is not None,
            "--replica-api-key needs --api-key: without it, clients without a key would reach "
            "key-protected replicas",
        )

    def replica_auth_headers(self) -> dict[str, str]:
        """The router's own requests to a replica (KV events, its model list): with
        --replica-api-key, else the router's own --api-key (one key for both), else none."""
        key = self.replica_api_key or self.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def is_vllm(self, url: str) -> bool:
        """Does this replica publish vLLM's KV events (rather than pagedock's stream)?"""
        return self.replica_kind == "vllm" or url in self.vllm_ports

    @functools.cached_property
    def vllm_ports(self) -> dict[str, tuple[int, int] | None]:
        """--vllm-replica entries: normalized URL -> its own (event, replay) ports, if given."""
        return dict(vllm_replica(entry) for entry in self.vllm_replicas)

    def kv_ports(self, url: str) -> tuple[int, int]:
        """(event port, replay port; 0 = none) of a vllm replica."""
        ports = self.vllm_ports.get(url)
        return ports if ports is not None else (self.kv_events_port, self.kv_replay_port)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
