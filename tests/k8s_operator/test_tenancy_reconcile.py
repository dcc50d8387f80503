"""spec.tenancy against the emulated API: a reconcile creates the tenants' ConfigMap (owned by the
LLMDeployment) and a router Deployment that mounts it with the keys' Secret, never reading the
Secret itself; removing tenancy deletes the ConfigMap and the router's volume."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
import yaml
from llm_operator.controller.reconcile import Reconciler
from llm_operator.k8s.kube import KubeClient
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, NAMESPACE, live, make_llmd, send

pytestmark = pytest.mark.asyncio
SETTINGS = OperatorSettings(peering_name="", liveness_port=0, scrape_metrics=False)
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
TENANCY = {
    "priorityClasses": {"interactive": 0, "batch": 10},
    "tenants": [
        {"name": "chat", "apiKeySecrets": [{"name": "tenant-keys", "key": "chat"}]},
        {
            "name": "batch",
            "apiKeySecrets": [{"name": "tenant-keys", "key": "batch"}],
            "priority": "batch",
            "tokensPerMinute": 100000,
        },
    ],
}


@pytest_asyncio.fixture()
async def reconciler(cluster: Emulator) -> AsyncIterator[Reconciler]:
    kube = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
    try:
        yield Reconciler(kube, SETTINGS)
    finally:
        await kube.close()


def key_secret() -> dict[str, Any]:
    data = {name: base64.b64encode(f"sk-{name}".encode()).decode() for name in ("chat", "batch")}
    meta = {"name": "tenant-keys", "namespace": NAMESPACE}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}


async def reconcile(reconciler: Reconciler, cluster: Emulator) -> dict[str, Any]:
    body = live(cluster, LLMD, "chat")
    assert body is not None
    await reconciler.reconcile(
        {"apiVersion": "pagedock.dev/v1alpha1", "kind": "LLMDeployment", **body}
    )
    return body


def router_pod(cluster: Emulator) -> dict[str, Any]:
    router = live(cluster, "apps/v1/deployments", "chat-router")
    assert router is not None, "no router Deployment"
    spec: dict[str, Any] = router["spec"]["template"]["spec"]
    return spec


async def test_tenancy_gives_an_owned_config_map_and_a_router_that_mounts_the_keys(
    cluster: Emulator, api: aiohttp.ClientSession, reconciler: Reconciler
) -> None:
    await send(api, "POST", SECRETS, key_secret())
    await send(api, "POST", LLMD_COLLECTION, make_llmd(tenancy=TENANCY))
    owner = await reconcile(reconciler, cluster)

    config_map = live(cluster, "v1/configmaps", "chat-tenants")
    assert config_map is not None, "no tenants ConfigMap"
    [reference] = config_map["metadata"]["ownerReferences"]
    assert reference["uid"] == owner["metadata"]["uid"] and reference["controller"] is True
    content = yaml.safe_load(config_map["data"]["tenants.yaml"])
    assert [t["name"] for t in content["tenants"]] == ["chat", "batch"]
    assert content["tenants"][1]["api_key_files"] == ["/etc/pagedock/tenants/keys/batch/0"]

    pod = router_pod(cluster)
    [volume] = [v for v in pod["volumes"] if v["name"] == "tenants"]
    sources = volume["projected"]["sources"]
    assert sources[0]["configMap"]["name"] == "chat-tenants"
    assert sources[1]["secret"]["name"] == "tenant-keys"
    args = pod["containers"][0]["args"]
    assert args[args.index("--tenants") + 1] == "/etc/pagedock/tenants/tenants.yaml"
    assert not [r.url.path for r in list(cluster["get"]) if "/secrets" in r.url.path]


async def test_removing_tenancy_deletes_the_config_map_and_the_routers_volume(
    cluster: Emulator, api: aiohttp.ClientSession, reconciler: Reconciler
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(tenancy=TENANCY))
    await reconcile(reconciler, cluster)
    assert live(cluster, "v1/configmaps", "chat-tenants") is not None

    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", {"spec": {"tenancy": None}})
    await reconcile(reconciler, cluster)

    assert live(cluster, "v1/configmaps", "chat-tenants") is None
    pod = router_pod(cluster)
    assert all(v["name"] != "tenants" for v in pod["volumes"])
    assert "--tenants" not in pod["containers"][0]["args"]
    assert "pagedock.dev/tenants-hash" not in (
        live(cluster, "apps/v1/deployments", "chat-router") or {}
    )["spec"]["template"]["metadata"].get("annotations", {})
    assert live(cluster, "v1/configmaps", "chat-engine") is not None  # the engines' stays


async def test_a_tenant_change_rolls_the_router_and_rewrites_the_file(
    cluster: Emulator, api: aiohttp.ClientSession, reconciler: Reconciler
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(tenancy=TENANCY))
    await reconcile(reconciler, cluster)
    router = live(cluster, "apps/v1/deployments", "chat-router") or {}
    before = router["spec"]["template"]["metadata"]["annotations"]["pagedock.dev/tenants-hash"]

    changed = {**TENANCY, "tenants": [TENANCY["tenants"][0]]}  # batch leaves
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", {"spec": {"tenancy": changed}})
    await reconcile(reconciler, cluster)

    router = live(cluster, "apps/v1/deployments", "chat-router") or {}
    after = router["spec"]["template"]["metadata"]["annotations"]["pagedock.dev/tenants-hash"]
    assert after != before
    config_map = live(cluster, "v1/configmaps", "chat-tenants") or {}
    content = yaml.safe_load(config_map["data"]["tenants.yaml"])
    assert [t["name"] for t in content["tenants"]] == ["chat"]
