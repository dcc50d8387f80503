"""Prometheus metrics with vLLM's names, so dashboards, autoscalers and gateways built for vLLM
read pagedock unchanged.

Everything here runs on the event loop: the async engine calls `observe_stats` with the
scheduler's stats after each step and `observe_outputs` with what each step's outputs added (both
installed as its listeners); the registry is per server so tests can run several in one process.

With LoRA (`max_loras` > 0), `vllm:lora_requests_info` names the adapters with running and with
waiting requests as vLLM does, and `pagedock:lora_requests_total` counts finished requests per
adapter; with LoRA off the info gauge says `max_lora="0"` and no adapter, and the counter is absent.

`pagedock:startup_stage_seconds{stage}` says when this process reached each start-up stage
(engine/server/startup_stages.py); the first finished request marks `first_request_served`.
`request_durations` keeps the last finished requests' durations for GET /drain (drain.py).
`tenants` holds the per-tenant metrics (tenancy/tenant_metrics.py). Speculative decoding's
metrics: spec_decode_metrics.py.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.server.request_durations import RequestDurations
from engine.server.spec_decode_metrics import SpecDecodeMetrics
from engine.server.startup_stages import StartupStagesCollector
from engine.server.tenancy.tenant_metrics import TenantMetrics
from engine.startup_stages import STARTUP_STAGES, mark_stage

if TYPE_CHECKING:
    from engine.core.scheduler_stats import SchedulerStats
    from engine.runtime.outputs import IterationStats

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
)
_REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
)


class EngineMetrics:
    """One server's metrics; `max_loras` is the engine's LoRA weight slots (0: LoRA off)."""

    _spec_decode: SpecDecodeMetrics | None = None
    """Speculative decoding's, made with the first stats that carry its counters."""

    def __init__(self, model_name: str, max_loras: int = 0) -> None:
        self.registry = _registry_with_startup_stages()
        self.model_name = model_name
        self.max_lora = str(max_loras)
        gauge, counter = self._gauge, self._counter
        self._running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        self._waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self._kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (1 = full)."
        )
        self._free_blocks = gauge(
            "pagedock:kv_cache_free_blocks",
            "KV blocks no request references (blocks that are free but cached count as free).",
        )
        self._total_blocks = gauge("pagedock:kv_cache_blocks", "KV blocks in the pool.")
        self._grammars = gauge(
            "pagedock:structured_output_grammars",
            "Grammar states held for structured outputs (one per unfinished guided request).",
        )
        self._prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache."
        )
        self._prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache."
        )
        self._preemptions = counter("vllm:num_preemptions", "Requests preempted to free KV blocks.")
        self._interrupted_steps = counter(
            "pagedock:interrupted_steps",
            "Steps cut short between layers for a light tenant's or more urgent newcomer.",
        )
        self._prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens prefilled.")
        self._generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self._success = Counter(
            "vllm:request_success",
            "Requests finished, by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self._ttft, self._itl, self._e2e, self._queue = self._latency_histograms()
        self._cache_config, self._lora = self._picker_info_gauges()
        self._lora_requests = None if max_loras == 0 else self._lora_request_counter()
        # Cumulative engine counters seen last; Prometheus counters only move by increments.
        self._last_stats: SchedulerStats | None = None

    def _latency_histograms(self) -> tuple[Histogram, Histogram, Histogram, Histogram]:
        """Each request's time to first token, between tokens, in all and in the queue."""
        histogram = self._histogram
        return (
            histogram(
                "vllm:time_to_first_token_seconds", "Arrival to first token.", _LATENCY_BUCKETS
            ),
            histogram(
                "vllm:inter_token_latency_seconds", "Time between output tokens.", _LATENCY_BUCKETS
            ),
            histogram(
                "vllm:e2e_request_latency_seconds", "Arrival to last token.", _REQUEST_BUCKETS
            ),
            histogram(
                "vllm:request_queue_time_seconds", "Arrival to first scheduled.", _REQUEST_BUCKETS
            ),
        )

    @functools.cached_property
    def request_durations(self) -> RequestDurations:
        """The recent requests' durations and the open ones' arrivals (GET /drain)."""
        return RequestDurations()

    @functools.cached_property
    def tenants(self) -> TenantMetrics:
        """The per-tenant metrics, in this registry (the server's start makes them)."""
        return TenantMetrics(self.registry, self.model_name)

    def _picker_info_gauges(self) -> tuple[Gauge, Gauge]:
        """The Gateway API Inference Extension's model-server protocol: pickers read the cache
        geometry and the LoRA adapters from these two, with vLLM's names and labels."""
        cache_config = Gauge(
            "vllm:cache_config_info",
            "Information of the engine's KV cache config (always 1).",
            ["block_size", "num_gpu_blocks", "enable_prefix_caching", "engine"],
            registry=self.registry,
        )
        lora = Gauge(
            "vllm:lora_requests_info",
            "LoRA adapters with running and with waiting requests (comma-separated) and max_lora "
            "(0: LoRA off); the value is the time the labels were last current, so a picker takes "
            "the newest.",
            ["max_lora", "running_lora_adapters", "waiting_lora_adapters"],
            registry=self.registry,
        )
        return cache_config, lora

    def _lora_request_counter(self) -> Counter:
        return Counter(
            "pagedock:lora_requests",
            "Requests finished per LoRA adapter, by finish reason (base-model requests: none).",
            ["model_name", "lora_name", "finished_reason"],
            registry=self.registry,
        )

    def set_cache_config(self, block_size: int, num_gpu_blocks: int, prefix_caching: bool) -> None:
        """Once at start-up: the KV pool's block size and block count (vLLM's num_gpu_blocks
        names the pool whatever the device)."""
        labels = (str(block_size), str(num_gpu_blocks), str(prefix_caching), "0")
        self._cache_config.labels(*labels).set(1)
        self._set_lora_info((), ())

    def _set_lora_info(self, running: Iterable[str], waiting: Iterable[str]) -> None:
        """vLLM's way: one series per (running, waiting) pair ever seen, each set to the time it
        was last current; a series is never removed, so the newest one is the state now."""
        labels = (self.max_lora, ",".join(running), ",".join(waiting))
        self._lora.labels(*labels).set(time.time())

    def observe_stats(self, stats: SchedulerStats) -> None:
        m = self.model_name
        self._set_lora_info(stats.running_lora_adapters, stats.waiting_lora_adapters)
        self._running.labels(m).set(stats.num_running)
        self._waiting.labels(m).set(stats.num_waiting)
        self._kv_usage.labels(m).set(stats.kv_cache_usage)
        self._free_blocks.labels(m).set(stats.num_free_kv_blocks)
        self._total_blocks.labels(m).set(stats.num_kv_blocks)
        self._grammars.labels(m).set(stats.num_grammar_states)
        last = self._last_stats
        for counter, field in (
            (self._prefix_queries, "prefix_cache_queries"),
            (self._prefix_hits, "prefix_cache_hits"),
            (self._preemptions, "num_preemptions"),
            (self._interrupted_steps, "num_interrupted_steps"),
        ):
            previous = None if last is None else getattr(last, field)
            counter.labels(m).inc(_delta(getattr(stats, field), previous))
        self._last_stats = stats
        if stats.spec_decoding_stats is not None:
            if self._spec_decode is None:
                self._spec_decode = SpecDecodeMetrics(self.registry, m)
            self._spec_decode.observe(stats.spec_decoding_stats)

    def observe_outputs(self, stats: IterationStats) -> None:
        m = self.model_name
        self._prompt_tokens.labels(m).inc(stats.num_prompt_tokens)
        self._generation_tokens.labels(m).inc(stats.num_generation_tokens)
        for ttft_s in stats.time_to_first_tokens_s:
            self._ttft.labels(m).observe(ttft_s)
        for itl_s in stats.inter_token_latencies_s:
            self._itl.labels(m).observe(itl_s)
        if stats.finished:
            mark_stage("first_request_served")
        for finished in stats.finished:
            timing = finished.timing
            self._success.labels(m, finished.finish_reasons[0]).inc()
            if finished.lora_name is not None and self._lora_requests is not None:
                self._lora_requests.labels(m, finished.lora_name, finished.finish_reasons[0]).inc()
            end = timing.finished_time or timing.arrival_time
            self._e2e.labels(m).observe(end - timing.arrival_time)
            self.request_durations.observe_finished(timing)
            if timing.first_scheduled_time is not None:
                queue_s = timing.first_scheduled_time - timing.arrival_time
                self._queue.labels(m).observe(queue_s)
                self.tenants.observe_queue_time(finished.tenant, finished.priority, queue_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, ["model_name"], registry=self.registry)

    def _counter(self, name: str, doc: str) -> Counter:
        # prometheus_client exposes a counter as NAME_total, as vLLM's are.
        return Counter(name, doc, ["model_name"], registry=self.registry)

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, ["model_name"], buckets=buckets, registry=self.registry)


def _registry_with_startup_stages() -> CollectorRegistry:
    """A registry of its own, holding this process's start-up stages (startup_stages.py)."""
    registry = CollectorRegistry()
    registry.register(StartupStagesCollector(STARTUP_STAGES))
    return registry


def _delta(current: int, last: int | None) -> int:
    # A counter that went down (an engine restart behind us) restarts from its new value.
    if last is None or current < last:
        return current
    return current - last
