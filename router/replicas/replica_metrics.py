"""Reading a replica's load from its Prometheus /metrics text (vLLM's metric names)."""

from __future__ import annotations

import math

from router.replicas.replica import ReplicaLoad

_FIELDS = {
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
}


def parse_replica_load(text: str) -> tuple[ReplicaLoad, list[str]]:
    """The load gauges and prefix-cache counters, summed over label sets (absent ones are 0), and
    the samples ignored because their value is NaN, infinite or negative."""
    values = dict.fromkeys(_FIELDS.values(), 0.0)
    rejected: list[str] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = _sample(line)
        field = _FIELDS.get(name)
        if field is None:
            continue
        # NOTE: every field is a count or a fraction; one NaN or Inf would poison the cost model
        # (Inf * 0 is NaN, int(Inf) raises) for every request, so it counts as absent instead.
        if math.isfinite(value) and value >= 0:
            values[field] += value
        else:
            rejected.append(f"{name}={value}")
    return ReplicaLoad(**values), rejected


def _sample(line: str) -> tuple[str, float]:
    """`name{labels} value [timestamp]` -> (name, value); (name, 0) when the value is unreadable."""
    brace = line.find("{")
    if brace >= 0:
        name, rest = line[:brace], line[line.rfind("}") + 1 :]
    else:
        name, _, rest = line.partition(" ")
    parts = rest.split()
    try:
        return name, float(parts[0]) if parts else 0.0
    except ValueError:
        return name, 0.0
