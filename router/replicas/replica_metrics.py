"""Reading a replica's load from its Prometheus /metrics text (vLLM's metric names), and its LoRA
adapters in weight slots from vllm:lora_requests_info."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from router.replicas.replica import ReplicaLoad

_FIELDS = {
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
}
LORA_INFO = "vllm:lora_requests_info"
CACHE_CONFIG_INFO = "vllm:cache_config_info"
_NUM_GPU_BLOCKS = re.compile(r'[{,]num_gpu_blocks="(\d+)"')


def parse_replica_load(text: str) -> tuple[ReplicaLoad, list[str]]:
    """The load gauges and prefix-cache counters, summed over label sets (absent ones are 0), and
    the samples ignored because their value is NaN, infinite or negative."""
    values: dict[str, Any] = dict.fromkeys(_FIELDS.values(), 0.0)
    rejected: list[str] = []
    lora_lines: list[str] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = _sample(line)
        if name == LORA_INFO:
            lora_lines.append(line)
            continue
        if name == CACHE_CONFIG_INFO:
            pool = _NUM_GPU_BLOCKS.search(line)
            values["num_gpu_blocks"] = int(pool.group(1)) if pool else 0
            continue
        field = _FIELDS.get(name)
        if field is None:
            continue
        # NOTE: every field is a count or a fraction; one NaN or Inf would poison the cost model
        # (Inf * 0 is NaN, int(Inf) raises) for every request, so it counts as absent instead.
        if math.isfinite(value) and value >= 0:
            values[field] += value
        else:
            rejected.append(f"{name}={value}")
    load = ReplicaLoad(**values)
    return (_with_lora_info(load, lora_lines) if lora_lines else load), rejected


def _with_lora_info(load: ReplicaLoad, lines: list[str]) -> ReplicaLoad:
    """`load` with the labels of the newest vllm:lora_requests_info sample (its value is the time
    of its update, vLLM's convention; an older label set may linger beside it)."""
    try:
        samples = [
            s for f in text_string_to_metric_families("\n".join(lines) + "\n") for s in f.samples
        ]
    except ValueError:
        return load
    if not samples:
        return load
    labels = max(samples, key=lambda s: s.value).labels
    max_lora = labels.get("max_lora", "0")
    return dataclasses.replace(
        load,
        max_lora=int(max_lora) if max_lora.isdigit() else 0,
        running_lora_adapters=_names(labels.get("running_lora_adapters", "")),
        waiting_lora_adapters=_names(labels.get("waiting_lora_adapters", "")),
    )


def _names(label: str) -> tuple[str, ...]:
    return tuple(name for name in label.split(",") if name)


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
