"""Issue 37 on the emulated cluster: an LLMDeployment with spec.tenancy (two tenants, their API
keys in Secrets). The operator renders the tenants ConfigMap, the router pod mounts it with the
keys (a projected volume, written as a kubelet does) and serves each tenant by its key: an unknown
key is a 401, a tenant past its requests per minute a 429 in OpenAI's shape with its rate-limit
headers, and the router's metrics count each tenant in its priority band."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.rbac import assert_every_request_allowed

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]

KEYS = {"chat": "sk-e2e-chat", "batch": "sk-e2e-batch"}
TENANCY = {
    "priorityClasses": {"interactive": 0, "batch": 10},
    "defaultPriority": "batch",
    "tenants": [
        {"name": "chat", "apiKeySecrets": [{"name": "chat-key"}], "priority": "interactive"},
        {"name": "batch", "apiKeySecrets": [{"name": "batch-key"}], "requestsPerMinute": 2},
    ],
}


def secret(name: str, key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"api-key": base64.b64encode(key.encode()).decode()},
    }


def with_tenancy(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["tenancy"] = TENANCY
    return obj


async def post(ip: str, key: str | None) -> tuple[int, Mapping[str, str], Any]:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = f"http://{ip}:8080/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=120)
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=body, headers=headers, timeout=timeout) as response,
    ):
        return response.status, response.headers.copy(), await response.json()  # any case


async def metrics(ip: str) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://{ip}:8080/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r,
    ):
        return await r.text()


async def test_each_tenant_is_served_by_its_key_within_its_quota(cluster: Cluster) -> None:
    await cluster.client.create(secret("chat-key", KEYS["chat"]))
    await cluster.client.create(secret("batch-key", KEYS["batch"]))
    await cluster.apply_example(with_tenancy)
    await cluster.wait_ready("default", "smollm2", timeout=420)
    assert cluster.api.live("v1/configmaps", "default", "smollm2-tenants")
    [router] = cluster.kubelet.pods("smollm2-router-")

    status, _, reply = await post(router.ip, KEYS["chat"])
    assert status == 200, reply
    for key in (None, "sk-nobody"):
        status, headers, reply = await post(router.ip, key)
        assert (status, reply["error"]["code"]) == (401, "invalid_api_key"), reply
    for _ in range(2):
        status, _, reply = await post(router.ip, KEYS["batch"])
        assert status == 200, reply
    status, headers, reply = await post(router.ip, KEYS["batch"])
    assert (status, reply["error"]["code"]) == (429, "requests_per_minute_exceeded"), reply
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert int(headers["retry-after"]) >= 1

    lines = [line for line in (await metrics(router.ip)).splitlines() if "tenant=" in line]
    admitted = "pagedock_router_tenant_requests_admitted_total"
    assert f'{admitted}{{priority="0",tenant="chat"}} 1.0' in lines, lines
    assert f'{admitted}{{priority="10",tenant="batch"}} 2.0' in lines, lines
    rejected = "pagedock_router_tenant_requests_rejected_total"
    assert f'{rejected}{{reason="requests_per_minute_exceeded",tenant="batch"}} 1.0' in lines, lines
    assert_every_request_allowed(cluster.api)
