"""spec.engine.kvEvents: vLLM-format KV events on the engines, with the pod IP in the topic and
the ZMQ ports fenced to the router's pods (and named peers)."""

import json
from typing import Any

import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.settings import OperatorSettings
from pydantic import ValidationError

from pagedock.kv.vllm_events import KVEventsConfig
from tests.k8s_operator.validation import validate_kubernetes

ON = {"engine": {"kvEvents": {"enabled": True}}}
ROUTER_PODS = {
    "podSelector": {
        "matchLabels": {
            "app.kubernetes.io/name": "pagedock",
            "app.kubernetes.io/instance": "chat",
            "app.kubernetes.io/component": "router",
        }
    }
}


def children(spec: dict[str, Any]) -> list[dict[str, Any]]:
    ctx = BuildContext("chat", "team-a", LLMDeploymentSpec.model_validate(spec), OperatorSettings())
    return build_children(ctx)


def engine_container(spec: dict[str, Any]) -> dict[str, Any]:
    deployment = next(
        c
        for c in children(spec)
        if c["kind"] == "Deployment" and c["metadata"]["name"] == "chat-engine"
    )
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def engine_policy_rules(spec: dict[str, Any]) -> list[dict[str, Any]]:
    policy = next(c for c in children(spec) if c["kind"] == "NetworkPolicy")
    validate_kubernetes(policy)
    rules: list[dict[str, Any]] = policy["spec"]["ingress"]
    return rules


def test_off_by_default() -> None:
    container = engine_container({})
    assert [p["name"] for p in container["ports"]] == ["http"]
    assert not any(e["name"] == "PAGEDOCK_KV_EVENTS_CONFIG" for e in container["env"])
    assert len(engine_policy_rules({})) == 1


def test_the_topic_carries_the_pod_ip_from_the_downward_api() -> None:
    env = engine_container(ON)["env"]
    names = [e["name"] for e in env]
    pod_ip = env[names.index("POD_IP")]
    assert pod_ip["valueFrom"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
    config_index = names.index("PAGEDOCK_KV_EVENTS_CONFIG")
    assert names.index("POD_IP") < config_index  # the kubelet expands only earlier variables
    config = json.loads(env[config_index]["value"])
    assert config == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "replay_endpoint": "tcp://*:5558",
        "topic": "kv@$(POD_IP):8000@smollm2-135m-instruct",
    }
    # What the engine then reads, the kubelet having expanded the pod IP:
    expanded = env[config_index]["value"].replace("$(POD_IP)", "10.0.0.5")
    assert KVEventsConfig.from_json(expanded).topic == "kv@10.0.0.5:8000@smollm2-135m-instruct"


def test_the_container_names_the_zmq_ports() -> None:
    spec = {"engine": {"kvEvents": {"enabled": True, "port": 6000, "replayPort": 6001}}}
    ports = engine_container(spec)["ports"]
    assert ports[1:] == [
        {"name": "kv-events", "containerPort": 6000, "protocol": "TCP"},
        {"name": "kv-replay", "containerPort": 6001, "protocol": "TCP"},
    ]


def test_network_policy_admits_the_zmq_ports_from_router_pods_only() -> None:
    http_rule, kv_rule = engine_policy_rules(ON)
    assert kv_rule == {
        "from": [ROUTER_PODS],
        "ports": [{"port": 5557, "protocol": "TCP"}, {"port": 5558, "protocol": "TCP"}],
    }
    assert all(p["port"] == 8000 for p in http_rule["ports"])


def test_named_peers_are_admitted_too_and_no_peer_means_no_rule() -> None:
    epp = {"podSelector": {"matchLabels": {"app": "llm-d-epp"}}}
    spec = {
        "router": {"enabled": False},
        "engine": {"kvEvents": {"enabled": True, "allowedFrom": [epp]}},
    }
    assert engine_policy_rules(spec)[1]["from"] == [epp]
    # An empty `from` would admit every pod: without a router or peers, nothing is admitted.
    alone = {"router": {"enabled": False}, **ON}
    assert len(engine_policy_rules(alone)) == 1


@pytest.mark.parametrize(
    "kv_events",
    [
        {"port": 5557, "replayPort": 5557},
        {"port": 8000},
        {"enabled": True, "topic": "mine"},
        {"port": 0},
    ],
)
def test_bad_kv_events_specs_are_refused(kv_events: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        LLMDeploymentSpec.model_validate({"engine": {"kvEvents": kv_events}})


@pytest.mark.parametrize("spec_name", ["on", "on-no-router"])
def test_every_child_is_valid_kubernetes(spec_name: str) -> None:
    spec = ON if spec_name == "on" else {"router": {"enabled": False}, **ON}
    for child in children(spec):
        validate_kubernetes(child)


def crd_schema() -> dict[str, Any]:
    from llm_operator.api.crd import build_crd

    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd_schema_has_kv_events_with_strict_fields() -> None:
    import jsonschema

    from tests.k8s_operator.validation import validate_custom_resource

    engine = crd_schema()["properties"]["spec"]["properties"]["engine"]["properties"]
    kv = engine["kvEvents"]
    assert set(kv["properties"]) == {"enabled", "port", "replayPort", "allowedFrom"}
    assert (
        kv["properties"]["port"]["default"] == 5557 and kv["properties"]["port"]["maximum"] == 65535
    )
    assert len(kv["x-kubernetes-validations"]) == 2

    def resource(kv_events: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "pagedock.dev/v1alpha1",
            "kind": "LLMDeployment",
            "metadata": {},
            "spec": {"engine": {"kvEvents": kv_events}},
        }

    validate_custom_resource(
        resource({"enabled": True, "allowedFrom": [{"podSelector": {}}]}), crd_schema()
    )
    for bad in ({"topic": "x"}, {"port": 70000}, {"enabled": "yes"}):
        with pytest.raises(jsonschema.ValidationError):
            validate_custom_resource(resource(bad), crd_schema())
