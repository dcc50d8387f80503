"""vLLM-format KV events of the engines (spec.engine.kvEvents): the engine's config, its ports,
and who may reach them.

The events carry raw prompt token ids on ZMQ ports without authentication, so they are off by
default, and when on, the engines' NetworkPolicy admits those ports from the router's pods and
the named peers only. The topic follows llm-d's convention, `kv@<pod IP>:<port>@<model>`, with
the pod IP from the downward API (the kubelet expands `$(POD_IP)` in the later variable).
"""

import json

from llm_operator.builders.common import Obj
from llm_operator.builders.context import BuildContext
from llm_operator.names import ENGINE_PORT, selector_labels

POD_IP_ENV = "POD_IP"
CONFIG_ENV = "PAGEDOCK_KV_EVENTS_CONFIG"


def kv_events_config(ctx: BuildContext) -> dict[str, object]:
    """The engine's --kv-events-config, vLLM's JSON fields."""
    kv = ctx.spec.engine.kv_events
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{kv.port}",
        "replay_endpoint": f"tcp://*:{kv.replay_port}",
        "topic": f"kv@$({POD_IP_ENV}):{ENGINE_PORT}@{ctx.served_model_name}",
    }


def kv_events_env(ctx: BuildContext) -> list[Obj]:
    if not ctx.spec.engine.kv_events.enabled:
        return []
    pod_ip = {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
    config = json.dumps(kv_events_config(ctx), separators=(",", ":"))
    return [
        {"name": POD_IP_ENV, "valueFrom": pod_ip},  # before the variable that refers to it
        {"name": CONFIG_ENV, "value": config},
    ]


def kv_events_container_ports(ctx: BuildContext) -> list[Obj]:
    kv = ctx.spec.engine.kv_events
    if not kv.enabled:
        return []
    return [
        {"name": "kv-events", "containerPort": kv.port, "protocol": "TCP"},
        {"name": "kv-replay", "containerPort": kv.replay_port, "protocol": "TCP"},
    ]


def kv_events_ingress_rules(ctx: BuildContext) -> list[Obj]:
    """The NetworkPolicy rule for the ZMQ ports: the router's pods and `allowedFrom`, no one else.

    NOTE: a rule with an empty `from` admits every source, so with no peer there is no rule.
    """
    kv = ctx.spec.engine.kv_events
    if not kv.enabled:
        return []
    peers: list[Obj] = list(kv.allowed_from)
    if ctx.spec.router.enabled:
        peers.insert(0, {"podSelector": {"matchLabels": selector_labels(ctx.name, "router")}})
    if not peers:
        return []
    ports = [{"port": p, "protocol": "TCP"} for p in (kv.port, kv.replay_port)]
    return [{"from": peers, "ports": ports}]
