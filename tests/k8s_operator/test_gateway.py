"""spec.gateway: the Gateway API Inference Extension's children (an InferencePool whose endpoint
picker is the router, the picker's Service, an optional HTTPRoute), as built and as the operator
applies them against kmock's emulator, with and without the extension's CRDs installed.

The rendered objects validate against tests/k8s_operator/gateway_schemas.py: InferencePool from
Inference Extension v1.6.0 (inference.networking.k8s.io/v1), HTTPRoute from Gateway API v1.6.1
(gateway.networking.k8s.io/v1, standard channel).
"""

from typing import Any

import aiohttp
import jsonschema
import pydantic
import pytest
from kopf.testing import KopfRunner
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children, child_refs
from llm_operator.settings import OperatorSettings

from pagedock.options import values_for
from router.config import RouterConfig
from router.server.cli import build_parser
from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.gateway_schemas import HTTP_ROUTE_V1, INFERENCE_POOL_V1
from tests.k8s_operator.helpers import (
    LLMD,
    NAMESPACE,
    condition,
    live,
    make_llmd,
    mark_ready,
    send,
    writes_over_resyncs,
)
from tests.k8s_operator.test_operator_e2e import CHILDREN, DEPLOYMENTS, SERVICES
from tests.k8s_operator.test_operator_status_e2e import warnings

POOLS = "inference.networking.k8s.io/v1/inferencepools"
ROUTES = "gateway.networking.k8s.io/v1/httproutes"
ROUTE = {
    "parentRefs": [{"name": "inference-gw", "namespace": "gw"}],
    "hostnames": ["llm.example.com"],
}
GATEWAY = {"httpRoute": ROUTE}
LLMD_PATH = f"/apis/pagedock.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments/chat"


def children(gateway: dict[str, Any] | None = GATEWAY, **spec: Any) -> list[dict[str, Any]]:
    if gateway is not None:
        spec["gateway"] = gateway
    model = LLMDeploymentSpec.model_validate(spec)
    return build_children(BuildContext("chat", NAMESPACE, model, OperatorSettings()))


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def router_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return find(objs, "Deployment", "chat-router")["spec"]["template"]["spec"]["containers"][0]


def test_the_pool_selects_the_engine_pods_on_their_port_and_names_the_picker_service() -> None:
    objs = children()
    pool = find(objs, "InferencePool", "chat")
    jsonschema.validate(pool, INFERENCE_POOL_V1)
    engine = find(objs, "Deployment", "chat-engine")["spec"]["template"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= engine["metadata"]["labels"].items()
    [engine_port] = engine["spec"]["containers"][0]["ports"]
    assert pool["spec"]["targetPorts"] == [{"number": engine_port["containerPort"]}]
    picker = pool["spec"]["endpointPickerRef"]
    assert (picker["kind"], picker["failureMode"]) == ("Service", "FailClose")
    assert "port" in picker  # the CRD's CEL rule: a Service reference needs a port
    service = find(objs, "Service", picker["name"])
    [service_port] = service["spec"]["ports"]
    assert service_port["port"] == picker["port"]["number"]
    router_pod = find(objs, "Deployment", "chat-router")["spec"]["template"]
    assert service["spec"]["selector"].items() <= router_pod["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in router_container(objs)["ports"]}
    assert service_port["targetPort"] in ports


def test_the_router_runs_as_the_picker_on_the_port_its_service_targets() -> None:
    objs = children({"shedTtftMs": 750, "failureMode": "FailOpen"})
    container = router_container(objs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = RouterConfig(
        **values_for(RouterConfig, build_parser().parse_args(container["args"][1:]))
    )
    assert config.picker_port == ports["picker"]
    assert config.picker_shed_ttft_ms == 750
    assert (
        find(objs, "InferencePool", "chat")["spec"]["endpointPickerRef"]["failureMode"]
        == "FailOpen"
    )


def test_the_route_sends_its_gateways_traffic_to_the_pool() -> None:
    route_spec = {**ROUTE, "path": "/llm", "requestTimeout": "600s"}
    route = find(children({"httpRoute": route_spec}), "HTTPRoute", "chat")
    jsonschema.validate(route, HTTP_ROUTE_V1)
    assert route["spec"]["parentRefs"] == [
        {
            "name": "inference-gw",
            "namespace": "gw",
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
        }
    ]
    assert route["spec"]["hostnames"] == ["llm.example.com"]
    [rule] = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "chat"}
    ]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/llm"}}]
    assert rule["filters"][0]["urlRewrite"]["path"] == {
        "type": "ReplacePrefixMatch",
        "replacePrefixMatch": "/",
    }
    assert rule["timeouts"] == {"request": "600s"}


def test_a_route_on_slash_needs_no_rewrite() -> None:
    [rule] = find(children(), "HTTPRoute", "chat")["spec"]["rules"]
    assert "filters" not in rule and "timeouts" not in rule


def test_without_http_route_only_the_pool_is_rendered_and_a_route_would_be_pruned() -> None:
    spec = LLMDeploymentSpec.model_validate({"gateway": {}})
    ctx = BuildContext("chat", NAMESPACE, spec, OperatorSettings())
    kinds = {o["kind"] for o in build_children(ctx)}
    assert "InferencePool" in kinds and "HTTPRoute" not in kinds
    assert ("HTTPRoute", "chat", False) in child_refs(ctx)


def test_without_gateway_there_is_no_pool_no_picker_and_no_picker_port() -> None:
    objs = children(None)
    assert not [o for o in objs if o["kind"] in ("InferencePool", "HTTPRoute")]
    assert not [o for o in objs if o["metadata"]["name"] == "chat-picker"]
    assert "--picker-port" not in router_container(objs)["args"]
    assert [p["name"] for p in router_container(objs)["ports"]] == ["http"]


def engine_policy_rules(gateway: dict[str, Any] | None) -> list[dict[str, Any]]:
    return find(children(gateway), "NetworkPolicy", "chat-engine")["spec"]["ingress"]


def test_named_data_plane_peers_join_the_router_on_the_engine_port() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gw"}}}
    [rule] = engine_policy_rules({"dataPlanePeers": [peer]})
    assert peer in rule["from"]
    assert {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "pagedock",
                "app.kubernetes.io/instance": "chat",
                "app.kubernetes.io/component": "router",
            }
        }
    } in rule["from"]


def test_without_named_peers_the_gateway_proxies_may_reach_the_engines() -> None:
    assert engine_policy_rules({}) == [{"ports": [{"port": 8000, "protocol": "TCP"}]}]
    assert "from" in engine_policy_rules(None)[0]  # no gateway: the router and scrapers only


def test_named_data_plane_peers_alone_reach_the_picker_port() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gw"}}}
    policy = find(children({"dataPlanePeers": [peer]}), "NetworkPolicy", "chat-router")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": 8080, "protocol": "TCP"}]},  # the router's HTTP API: open as before
        {"from": [peer], "ports": [{"port": 9002, "protocol": "TCP"}]},
    ]


def test_without_named_peers_no_policy_fences_the_router() -> None:
    for gateway in ({}, None):
        objs = children(gateway)
        assert not [
            o for o in objs if o["kind"] == "NetworkPolicy" and "router" in o["metadata"]["name"]
        ]
    refs = child_refs(BuildContext("chat", NAMESPACE, LLMDeploymentSpec(), OperatorSettings()))
    assert ("NetworkPolicy", "chat-router", False) in refs  # deleted when the peers go


@pytest.mark.parametrize(
    "gateway",
    [
        {"failureMode": "Sometimes"},
        {"httpRoute": {"parentRefs": []}},
        {"httpRoute": {"parentRefs": [{"name": "gw"}], "hostnames": ["Not_A_Host"]}},
        {"httpRoute": {"parentRefs": [{"name": "gw"}], "requestTimeout": "10 minutes"}},
        {"shedTtftMs": -1},
        {"unknownField": 1},
    ],
)
def test_invalid_gateway_specs_are_refused(gateway: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        LLMDeploymentSpec.model_validate({"gateway": gateway})


def test_the_gateway_needs_the_router() -> None:
    with pytest.raises(pydantic.ValidationError, match="gateway needs the router"):
        LLMDeploymentSpec.model_validate({"gateway": {}, "router": {"enabled": False}})


# ---- the operator against the emulator --------------------------------------------------------


def reason(cluster: Emulator, type_: str) -> str | None:
    return (condition(live(cluster, LLMD, "chat"), type_) or {}).get("reason")


async def ready_deployments(cluster: Emulator, api: aiohttp.ClientSession) -> None:
    for name in ("chat-engine", "chat-router"):
        await mark_ready(api, await eventually(lambda name=name: live(cluster, DEPLOYMENTS, name)))


@pytest.mark.asyncio
async def test_the_operator_creates_the_pool_and_route_owned_by_the_llmdeployment(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(
        api,
        "POST",
        f"/apis/pagedock.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments",
        make_llmd(gateway=GATEWAY),
    )
    pool = await eventually(lambda: live(cluster, POOLS, "chat"))
    route = await eventually(lambda: live(cluster, ROUTES, "chat"))
    picker = await eventually(lambda: live(cluster, SERVICES, "chat-picker"))
    owner = live(cluster, LLMD, "chat") or {}
    for child in (pool, route, picker):
        [reference] = child["metadata"]["ownerReferences"]
        assert (reference["kind"], reference["uid"]) == ("LLMDeployment", owner["metadata"]["uid"])
    await ready_deployments(cluster, api)
    await eventually(lambda: reason(cluster, "Ready") == "AllReady")
    assert reason(cluster, "GatewayReady") == "PoolCreated"


@pytest.mark.asyncio
async def test_an_edited_pool_is_restored_and_dropping_the_gateway_prunes_its_children(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(
        api,
        "POST",
        f"/apis/pagedock.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments",
        make_llmd(gateway=GATEWAY),
    )
    await eventually(lambda: live(cluster, ROUTES, "chat"))
    pool_path = f"/apis/inference.networking.k8s.io/v1/namespaces/{NAMESPACE}/inferencepools/chat"
    await send(api, "PATCH", pool_path, {"spec": {"targetPorts": [{"number": 9999}]}})
    await eventually(
        lambda: (live(cluster, POOLS, "chat") or {})["spec"]["targetPorts"] == [{"number": 8000}]
    )
    await send(api, "PATCH", LLMD_PATH, {"spec": {"gateway": None}})
    for resource, name in ((POOLS, "chat"), (ROUTES, "chat"), (SERVICES, "chat-picker")):
        await eventually(lambda resource=resource, name=name: live(cluster, resource, name) is None)
    await eventually(lambda: reason(cluster, "GatewayReady") == "GatewayDisabled")


@pytest.mark.asyncio
async def test_missing_crds_are_named_and_the_rest_of_the_deployment_is_built(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    cluster.uninstall("inference.networking.k8s.io")
    cluster.uninstall("gateway.networking.k8s.io")
    await send(
        api,
        "POST",
        f"/apis/pagedock.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments",
        make_llmd(gateway=GATEWAY),
    )
    # NOTE: the children are applied one after another: wait for the picker's Service too, not
    # just for the first ten (CI's run of f757567 read it before it was made).
    await eventually(lambda: all(live(cluster, res, name) for res, name in CHILDREN[:10]))
    await eventually(lambda: live(cluster, SERVICES, "chat-picker"))
    await ready_deployments(cluster, api)
    await eventually(lambda: reason(cluster, "GatewayReady") == "GatewayCRDMissing")
    gateway = condition(live(cluster, LLMD, "chat"), "GatewayReady") or {}
    assert "httproutes.gateway.networking.k8s.io" in gateway["message"]
    assert "inferencepools.inference.networking.k8s.io" in gateway["message"]
    ready = await eventually(lambda: condition(live(cluster, LLMD, "chat"), "Ready"))
    assert (ready["status"], ready["reason"]) == ("False", "GatewayCRDMissing")
    await eventually(lambda: reason(cluster, "RouterReady") == "ReplicasReady")  # serving
    await eventually(lambda: warnings(cluster, "GatewayCRDMissing"))  # kopf posts it later
    await writes_over_resyncs(cluster, "chat", 2)  # two resync passes seen
    assert len(warnings(cluster, "GatewayCRDMissing")) == 1  # once, not on every pass

    cluster.install("inference.networking.k8s.io")  # the resync picks it up, no event needed
    cluster.install("gateway.networking.k8s.io")
    await eventually(lambda: live(cluster, POOLS, "chat") and live(cluster, ROUTES, "chat"))
    await eventually(lambda: reason(cluster, "Ready") == "AllReady")


def test_the_router_reads_the_picker_key_from_its_secret() -> None:
    secret = {"name": "gw", "key": "picker-key"}
    env = {
        e["name"]: e.get("valueFrom")
        for e in router_container(children(pickerKeySecret=secret))["env"]
    }
    assert env["PAGEDOCK_PICKER_API_KEY"] == {"secretKeyRef": {"name": "gw", "key": "picker-key"}}
    without_gateway = router_container(children(None, pickerKeySecret=secret))
    assert "PAGEDOCK_PICKER_API_KEY" not in {e["name"] for e in without_gateway["env"]}
