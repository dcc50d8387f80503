"""Where this engine's vLLM-format KV events can be read, in the shapes vLLM's own consumers ask
for them (the vLLM project's router, `vllm-router --policy kv_aware`, finds a worker's events
this way when it is given no static `--kv-event-source`):

    GET /get_server_info    {"model_id", "model_path", "instance_id", "kv_block_size",
                             "effective_attention_block_size"}
    GET /kv_event_sources   {"0": {"endpoint", "replay_endpoint", "topic", "publisher",
                             "encoding", "enable_kv_cache_events", "hwm", "buffer_steps"}}
                            keyed by data-parallel rank (pagedock has one); {} when the engine
                            publishes no ZMQ events

An endpoint bound on a wildcard (`tcp://*:5557`, resolved by ZeroMQ to 0.0.0.0 or ::) is
reported at the address the asking client reached this server on, so that it can connect; any
other address is reported as configured. The event stream carries prompts' token ids: these routes
sit behind the API key, and the ports themselves should stay inside the cluster
(docs/router.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from engine.server.kv_events.vllm_publisher import VllmKVPublisher

_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "*", ""})


def server_info(model: str, model_path: str, instance_id: str, block_size: int) -> dict[str, Any]:
    """GET /get_server_info: the fields vLLM's router reads of a worker."""
    return {
        "model_id": model,
        "model_path": model_path,
        "instance_id": instance_id,
        "kv_block_size": block_size,
        "effective_attention_block_size": block_size,
    }


def kv_event_sources(publisher: VllmKVPublisher | None, local_host: str) -> dict[str, Any]:
    """GET /kv_event_sources, for a client that reached this server at `local_host`."""
    if publisher is None:
        return {}
    config = publisher.config
    endpoint, replay = publisher.endpoints
    source = {
        "endpoint": reachable(endpoint, local_host),
        "replay_endpoint": None if replay is None else reachable(replay, local_host),
        "topic": config.topic,
        "publisher": "zmq",
        "encoding": "msgpack",
        "enable_kv_cache_events": True,
        "hwm": config.hwm,
        "buffer_steps": config.buffer_steps,
    }
    return {"0": source}


def reachable(endpoint: str, local_host: str) -> str:
    """`endpoint` with a wildcard host replaced by `local_host` (tcp:// only)."""
    if not endpoint.startswith("tcp://"):
        return endpoint
    parts = urlsplit(endpoint)
    if (parts.hostname or "") not in _WILDCARD_HOSTS or parts.port is None:
        return endpoint
    host = f"[{local_host}]" if ":" in local_host else local_host
    return f"tcp://{host}:{parts.port}"
