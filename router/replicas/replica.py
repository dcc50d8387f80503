"""Replica: what the router knows of one engine replica — health, reported load, the models and
LoRA adapters it serves, the requests it routed there, and the identity of its KV cache (instance
id, root hash, block size)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pagedock.kv.block_hash import BlockHash, lora_root_hash
from router.config import RouterConfig
from router.kv.vllm_kv_view import chain_root
from router.replicas.served_models import ServedModels


@dataclass
class ReplicaLoad:
    """The replica's own report, scraped from its /metrics (vLLM's metric names)."""

    num_requests_running: float = 0.0
    num_requests_waiting: float = 0.0
    kv_cache_usage: float = 0.0
    prefix_cache_hits: float = 0.0
    prefix_cache_queries: float = 0.0
    max_lora: int = 0
    """vllm:lora_requests_info's weight slots (its newest sample's labels, as the rest below)."""
    running_lora_adapters: tuple[str, ...] | None = None
    """Adapters with running requests; None while the replica does not report them."""
    waiting_lora_adapters: tuple[str, ...] = ()
    """Adapters with waiting requests (in a slot, or about to be loaded into one)."""
    num_gpu_blocks: int = 0
    """Blocks in its KV pool (vllm:cache_config_info's label); 0 while it does not say."""


@dataclass
class InflightRequest:
    """A request the router sent to this replica and has not seen finish."""

    uncached_tokens: int
    """Prompt tokens the replica must prefill (its cached prefix excluded)."""
    lora_name: str | None = None
    """The LoRA adapter it runs on; None: the base model."""
    started: bool = False
    """True once the first byte came back: the prefill is done, it is decoding."""


@dataclass
class Replica:
    url: str
    healthy: bool = True
    """False from a failed health check or request until a health check passes again."""
    warming: bool = False
    """True while it is sent the hot prefixes (router/replicas/warmer.py): not yet a routing
    candidate."""
    unhealthy_since: float | None = None
    """time.monotonic() when it last left the healthy set; None while healthy."""
    load: ReplicaLoad = field(default_factory=ReplicaLoad)
    served_models: ServedModels | None = None
    """Its GET /v1/models (base model and LoRA adapters), read again every health check; None
    until one answered, and again once it leaves the healthy set (a failed read keeps the last
    list)."""
    inflight: dict[str, InflightRequest] = field(default_factory=dict)
    finished: int = 0
    """Requests this router sent here and saw end (a count since it joined)."""
    load_finished: int = 0
    """`finished` when the report in `load` was asked for."""
    instance_id: str | None = None
    root_hash: bytes | None = None
    """h_0 of the replica's hash chains, from its KV snapshot; None until one arrived."""
    block_size: int | None = None
    kv_synced: bool = False
    """True once a snapshot of the current event stream was applied."""
    kv_seq: int = -1
    """Sequence number of the last KV event batch applied (the snapshot's, at first)."""
    kv_error: str | None = None
    """Why the KV event subscription is refused (401/403: a key problem); None once it succeeds."""
    last_event_at: float | None = None
    """time.monotonic() of the last line from the KV event stream."""
    failures: int = 0
    kind: str = "pagedock"
    """pagedock (NDJSON events with snapshots) or vllm (vLLM's ZMQ events, no snapshot)."""
    kv_missed_batches: int = 0
    """vllm: event batches known lost (not received, not replayable) since the view was exact."""
    kv_unchained_blocks: int = 0
    """vllm: stored blocks left out of the index (their parent was announced before the router
    could see it)."""

    def begin(self, request_id: str, uncached_tokens: int, lora_name: str | None = None) -> None:
        self.inflight[request_id] = InflightRequest(uncached_tokens, lora_name)

    def first_byte(self, request_id: str) -> None:
        request = self.inflight.get(request_id)
        if request is not None:
            request.started = True

    def end(self, request_id: str) -> None:
        if self.inflight.pop(request_id, None) is not None:
            self.finished += 1

    def reported_requests(self) -> tuple[float, float]:
        """Its last report of running and waiting requests, less those this router saw end here
        since it asked. A report is up to a health interval old: without this, one client's
        requests in turn on two replicas would count on both."""
        gone = float(self.finished - self.load_finished)
        running, waiting = self.load.num_requests_running, self.load.num_requests_waiting
        return max(0.0, running - gone), max(0.0, waiting - max(0.0, gone - running))

    def queued_tokens(self, config: RouterConfig) -> int:
        """Work ahead of a new request, in prefill-token equivalents: the larger of the router's
        own view (exact for what it routed, updated at each decision) and the replica's report
        (which also counts what other routers sent)."""
        own = sum(
            config.running_request_tokens if r.started else r.uncached_tokens
            for r in self.inflight.values()
        )
        running, waiting = self.reported_requests()
        reported = running * config.running_request_tokens + waiting * config.waiting_request_tokens
        return int(max(own, reported))

    def chain_root(self, lora_name: str | None) -> BlockHash | None:
        """The root a request's block hashes chain from here: the replica's own for the base
        model; for a LoRA adapter, the adapter's root, derived as this replica's events derive it
        (a pagedock engine's from its root hash, or the root its /v1/models lists for an
        adapter loaded again with other weights; vLLM events' from their `lora_name`). None until
        the replica's root is known (no affinity to claim). A salted request's chain starts from
        this root salted (PromptBlocks.hashes)."""
        if self.root_hash is None:
            return None
        if self.kind == "vllm":
            # NOTE: even for the base model: a pagedock engine that publishes vLLM events names
            # its own root in /health, but the router re-hashed those events from its own.
            return chain_root(lora_name)
        if lora_name is None:
            return self.root_hash
        listed = None if self.served_models is None else self.served_models.kv_root(lora_name)
        return listed or lora_root_hash(self.root_hash, lora_name)

    def holds_adapter(self, lora_name: str) -> bool:
        """Is the adapter in a weight slot: running or waiting there (vllm:lora_requests_info),
        or about to be (a request this router sent for it is in flight)? True while the replica
        does not report its adapters: no load is charged on a guess."""
        load = self.load
        if load.running_lora_adapters is None:
            return True
        return (
            lora_name in load.running_lora_adapters
            or lora_name in load.waiting_lora_adapters
            or any(r.lora_name == lora_name for r in self.inflight.values())
        )

    def forget_model(self, model: str) -> None:
        """The replica refused `model` (404): not a candidate for it until its list names it
        again."""
        if self.served_models is not None:
            self.served_models = self.served_models.without(model)

    def kv_view(self) -> dict[str, object]:
        """How complete the router's view of this replica's cache is."""
        if self.kind == "pagedock":  # a snapshot then every delta: exact while synced
            return {"source": "snapshot", "complete": self.kv_synced}
        return {
            "source": "vllm-events",
            "complete": self.kv_synced
            and not self.kv_missed_batches
            and not self.kv_unchained_blocks,
            "missed_batches": self.kv_missed_batches,
            "unchained_blocks": self.kv_unchained_blocks,
        }

    def kv_event_lag_s(self, now: float | None = None) -> float | None:
        if self.last_event_at is None:
            return None
        return (time.monotonic() if now is None else now) - self.last_event_at
