"""Tenants through a live router (router/flow/): who a request belongs to, what reaches the
engines, quotas answered as OpenAI's clients expect, exact token counts, and the flow queue's
429s. The replicas are stand-ins (tests/router/fake_replica.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pagedock.http.internal_key import INTERNAL_KEY_HEADER
from pagedock.tenancy.tenants import TENANT_HEADER
from tests.eventually import eventually
from tests.redis_server import start_redis
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router

pytestmark = pytest.mark.timeout(60)
TENANTS = {
    "priority_classes": {"interactive": 0, "batch": 10},
    "default_priority": "batch",
    "tenants": [
        {"name": "chat", "api_keys": ["sk-chat"], "priority": "interactive"},
        {"name": "sweep", "api_keys": ["sk-sweep"], "requests_per_minute": 2},
        {"name": "metered", "api_keys": ["sk-metered"], "tokens_per_minute": 100_000},
    ],
}
PROMPT = {"model": "fake", "prompt": "hello there", "max_tokens": 4}


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def fleet(stack: ExitStack, tmp_path: Path, **overrides: Any) -> tuple[FakeReplica, str]:
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps(TENANTS))
    fake = FakeReplica()
    replica = stack.enter_context(ServerThread(fake.app))
    router = serve_router(stack, [replica.url], tenants=str(path), **overrides)
    return fake, router


def post(router: str, key: str | None, body: dict[str, Any] = PROMPT) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(router + "/v1/completions", json=body, headers=headers, timeout=10)


def metric(router: str, name: str, **labels: str) -> float:
    text = httpx.get(router + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def test_only_a_tenants_key_or_the_api_key_gets_in(stack: ExitStack, tmp_path: Path) -> None:
    _, router = fleet(stack, tmp_path, api_key="sk-operator")
    for key in (None, "sk-unknown"):
        response = post(router, key)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert response.headers["www-authenticate"] == "Bearer"
    assert post(router, "sk-chat").status_code == 200
    assert post(router, "sk-operator").status_code == 200  # the operator's key: tenant default
    models = httpx.get(router + "/v1/models", headers={"Authorization": "Bearer sk-chat"})
    assert models.status_code == 200


def test_the_engines_learn_the_tenant_and_its_priority(stack: ExitStack, tmp_path: Path) -> None:
    fake, router = fleet(stack, tmp_path, internal_api_key="internal-1")
    assert post(router, "sk-chat", {**PROMPT, "priority": -5}).status_code == 200
    assert fake.last_headers[TENANT_HEADER] == "chat"
    assert fake.last_headers[INTERNAL_KEY_HEADER] == "internal-1"
    assert json.loads(fake.last_body)["priority"] == 0  # never more urgent than its tenant
    post(router, "sk-sweep")
    assert json.loads(fake.last_body)["priority"] == 10  # the default class
    post(router, "sk-sweep", {**PROMPT, "priority": 20})
    assert json.loads(fake.last_body)["priority"] == 20  # less urgent is its own choice


def test_the_tenant_header_names_the_tenant(stack: ExitStack, tmp_path: Path) -> None:
    fake, router = fleet(stack, tmp_path, tenant_header="x-gateway-tenant")
    ok = httpx.post(router + "/v1/completions", json=PROMPT, headers={"x-gateway-tenant": "chat"})
    assert ok.status_code == 200 and fake.last_headers[TENANT_HEADER] == "chat"
    unknown = httpx.post(
        router + "/v1/completions", json=PROMPT, headers={"x-gateway-tenant": "nobody"}
    )
    assert unknown.status_code == 401 and "names no tenant" in unknown.json()["error"]["message"]


def test_over_its_quota_a_tenant_gets_openais_rate_limit_answer(
    stack: ExitStack, tmp_path: Path
) -> None:
    _, router = fleet(stack, tmp_path)
    first = post(router, "sk-sweep")
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert post(router, "sk-sweep").status_code == 200
    client = openai.OpenAI(base_url=router + "/v1", api_key="sk-sweep", max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        client.completions.create(model="fake", prompt="hello", max_tokens=4)
    response = refused.value.response
    assert refused.value.code == "requests_per_minute_exceeded"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert post(router, "sk-chat").status_code == 200  # another tenant is served
    assert (
        metric(
            router,
            "pagedock_router_tenant_requests_rejected_total",
            tenant="sweep",
            reason="requests_per_minute_exceeded",
        )
        == 1
    )


def test_routers_sharing_a_quota_store_hold_a_tenants_limit_across_them(
    stack: ExitStack, tmp_path: Path
) -> None:
    """Two routers of one fleet, counting in one Redis (--quota-store): the tenant's two requests
    a minute are two in all, whichever router each reaches; a third, on either, is OpenAI's 429."""
    redis_server = start_redis(tmp_path)
    stack.callback(redis_server.stop)
    fake = FakeReplica()
    replica = stack.enter_context(ServerThread(fake.app))
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps(TENANTS))
    routers = [
        serve_router(stack, [replica.url], tenants=str(path), quota_store=redis_server.url)
        for _ in range(2)
    ]
    first, second = post(routers[0], "sk-sweep"), post(routers[1], "sk-sweep")
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    for router in routers:
        client = openai.OpenAI(base_url=router + "/v1", api_key="sk-sweep", max_retries=0)
        with pytest.raises(openai.RateLimitError) as refused:
            client.completions.create(model="fake", prompt="hello", max_tokens=4)
        assert refused.value.code == "requests_per_minute_exceeded"
        assert int(refused.value.response.headers["retry-after"]) >= 1
    assert post(routers[1], "sk-chat").status_code == 200  # another tenant is served


def test_tokens_are_counted_exactly_under_concurrency(stack: ExitStack, tmp_path: Path) -> None:
    fake, router = fleet(stack, tmp_path)
    fake.completion_tokens = 7

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10) as client:
            headers = {"Authorization": "Bearer sk-metered"}
            url = router + "/v1/completions"
            return await asyncio.gather(
                *(client.post(url, json=PROMPT, headers=headers) for _ in range(20))
            )

    responses = asyncio.run(send_all())
    assert all(r.status_code == 200 for r in responses)
    completion = metric(
        router, "pagedock_router_tenant_tokens_total", tenant="metered", kind="completion"
    )
    assert completion == 7 * 20
    body_bytes = len(json.dumps(PROMPT, separators=(",", ":")).encode())
    prompt = metric(router, "pagedock_router_tenant_tokens_total", tenant="metered", kind="prompt")
    assert prompt == 20 * (body_bytes // 4)  # no tokenizer here: about four bytes a token


@pytest.mark.asyncio
async def test_a_busy_fleet_queues_then_sheds_with_429(stack: ExitStack, tmp_path: Path) -> None:
    fake, router = fleet(stack, tmp_path, max_inflight_per_replica=1, flow_queue_size=1)
    fake.mode = "hang"
    headers = {"Authorization": "Bearer sk-chat"}
    async with httpx.AsyncClient(timeout=30) as client:
        url = router + "/v1/completions"
        holding = asyncio.ensure_future(client.post(url, json=PROMPT, headers=headers))
        await eventually(lambda: fake.calls == 1, what="the first request reached the replica")
        waiting = asyncio.ensure_future(client.post(url, json=PROMPT, headers=headers))

        async def queued() -> bool:
            return (await client.get(router + "/router/demand")).json()["num_flow_queued"] == 1

        await eventually(queued, what="the second request waits in the flow queue")
        refused = await client.post(url, json=PROMPT, headers=headers)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "fleet_saturated"
        assert int(refused.headers["retry-after"]) >= 1
        fake.mode = "ok"
        holding.cancel()  # its client leaves: the slot goes to the waiting request
        assert (await waiting).status_code == 200
        await asyncio.gather(holding, return_exceptions=True)
