"""Tenants on a live `pagedock serve` without a router (docs/server.md, "Tenants, priorities and
quotas"): who gets in, quotas answered as OpenAI's clients expect while other tenants are served,
exact token counts under concurrency, the priority a tenant allows, and the router's tenant
header trusted only with the fleet's internal key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pagedock.http.internal_key import INTERNAL_KEY_HEADER
from pagedock.tenancy.tenants import TENANT_HEADER
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server

pytestmark = pytest.mark.timeout(180)
INTERNAL_KEY = "fleet-internal-key"
TENANTS = {
    "priority_classes": {"interactive": 0, "batch": 10},
    "default_priority": "batch",
    "tenants": [
        {"name": "chat", "api_keys": ["sk-chat"], "priority": "interactive"},
        {"name": "sweep", "api_keys": ["sk-sweep"], "requests_per_minute": 1},
        {"name": "metered", "api_keys": ["sk-metered"], "tokens_per_minute": 1_000_000},
    ],
}
PROMPT = {"prompt": "Paged attention keeps", "max_tokens": 4}


@pytest.fixture(scope="module")
def server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    tenants = tmp_path_factory.mktemp("tenants") / "tenants.json"
    tenants.write_text(json.dumps(TENANTS))
    args = tiny_server_args(tiny_model_dir, "--max-model-len", "256", "--tenants", str(tenants))
    env = {"PAGEDOCK_API_KEY": "sk-operator", "PAGEDOCK_INTERNAL_API_KEY": INTERNAL_KEY}
    log = tmp_path_factory.mktemp("logs") / "tenants-server.log"
    server = start_server(args, log, env=env)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def untrusting_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """No tenants file, but an internal key: only the routers may name a tenant."""
    args = tiny_server_args(tiny_model_dir, "--max-model-len", "256")
    log = tmp_path_factory.mktemp("logs") / "untrusting-server.log"
    server = start_server(args, log, env={"PAGEDOCK_INTERNAL_API_KEY": INTERNAL_KEY})
    yield server
    server.stop()


def post(
    server: ServerProcess, key: str | None, body: dict[str, Any] = PROMPT, **headers: str
) -> httpx.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(f"{server.url}/v1/completions", json=body, headers=headers, timeout=60)


def metric(server: ServerProcess, name: str, **labels: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def test_only_a_tenants_key_or_the_api_key_gets_in(server: ServerProcess) -> None:
    for key in (None, "sk-unknown"):
        response = post(server, key)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert response.headers["www-authenticate"] == "Bearer"
    assert post(server, "sk-chat").status_code == 200
    assert post(server, "sk-operator").status_code == 200  # the operator's key: tenant default
    models = f"{server.url}/v1/models"
    assert httpx.get(models, headers={"Authorization": "Bearer sk-chat"}).status_code == 200
    assert httpx.get(models).status_code == 401


def test_over_its_quota_a_tenant_gets_openais_rate_limit_answer_while_another_is_served(
    server: ServerProcess, model_name: str
) -> None:
    first = post(server, "sk-sweep")
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-sweep", max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        client.completions.create(model=model_name, prompt="hello", max_tokens=4)
    assert refused.value.code == "requests_per_minute_exceeded"
    headers = refused.value.response.headers
    assert 1 <= int(headers["retry-after"]) <= 60
    assert headers["x-ratelimit-limit-requests"] == "1"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-reset-requests" in headers
    assert post(server, "sk-chat").status_code == 200  # another tenant is served
    reason = "requests_per_minute_exceeded"
    rejected = "pagedock:tenant_requests_rejected_total"
    assert metric(server, rejected, tenant="sweep", reason=reason) == 1


def test_tokens_are_counted_exactly_under_concurrent_requests(server: ServerProcess) -> None:
    headers = {"Authorization": "Bearer sk-metered"}
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("completions", {"prompt": ["one prompt", "and another one"], "max_tokens": 5, "n": 2}),
        ("completions", {**PROMPT, "stream": True, "stream_options": {"include_usage": True}}),
        ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}),
        (
            "chat/completions",
            {
                "messages": [{"role": "user", "content": "stream it"}],
                "max_tokens": 7,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    ] * 3

    async def send(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, int]:
        response = await client.post(f"{server.url}/v1/{path}", json=body, headers=headers)
        assert response.status_code == 200, response.text
        assert int(response.headers["x-ratelimit-limit-tokens"]) == 1_000_000
        if not body.get("stream"):
            return dict(response.json()["usage"])
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
        return dict(json.loads(events[-1])["usage"])

    async def send_all() -> list[dict[str, int]]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(send(client, path, body) for path, body in bodies))

    before = {
        kind: metric(server, f"pagedock:tenant_{kind}_tokens_total", tenant="metered")
        for kind in ("prompt", "generation")
    }
    usages = asyncio.run(send_all())
    prompt = metric(server, "pagedock:tenant_prompt_tokens_total", tenant="metered")
    generated = metric(server, "pagedock:tenant_generation_tokens_total", tenant="metered")
    assert prompt - before["prompt"] == sum(u["prompt_tokens"] for u in usages)
    assert generated - before["generation"] == sum(u["completion_tokens"] for u in usages)
    admitted = "pagedock:tenant_requests_admitted_total"
    assert metric(server, admitted, tenant="metered", priority="10") >= len(bodies)


def test_a_request_runs_no_more_urgently_than_its_tenant_allows(server: ServerProcess) -> None:
    queue_time = "pagedock:tenant_queue_time_seconds_count"
    before = metric(server, queue_time, tenant="metered", priority="10")
    assert post(server, "sk-metered", {**PROMPT, "priority": -3}).status_code == 200
    assert metric(server, queue_time, tenant="metered", priority="10") == before + 1
    before_other = metric(server, queue_time, tenant="chat", priority="other")
    assert post(server, "sk-chat", {**PROMPT, "priority": 7}).status_code == 200  # its choice
    assert metric(server, queue_time, tenant="chat", priority="other") == before_other + 1


def test_a_router_names_the_tenant_only_with_the_internal_key(server: ServerProcess) -> None:
    named = {TENANT_HEADER: "chat", INTERNAL_KEY_HEADER: INTERNAL_KEY}
    assert post(server, None, **named).status_code == 200
    forged = {TENANT_HEADER: "chat", INTERNAL_KEY_HEADER: "a guess"}
    assert post(server, None, **forged).status_code == 401


def test_without_tenants_the_tenant_header_needs_the_internal_key(
    untrusting_server: ServerProcess,
) -> None:
    admitted = "pagedock:tenant_requests_admitted_total"
    assert post(untrusting_server, None, **{TENANT_HEADER: "team-a"}).status_code == 200
    assert metric(untrusting_server, admitted, tenant="team-a") == 0
    assert metric(untrusting_server, admitted, tenant="default") == 1
    trusted = {TENANT_HEADER: "team-a", INTERNAL_KEY_HEADER: INTERNAL_KEY}
    assert post(untrusting_server, None, **trusted).status_code == 200
    assert metric(untrusting_server, admitted, tenant="team-a") == 1


def test_without_an_internal_key_the_routers_tenant_header_is_trusted(
    tiny_server: ServerProcess,
) -> None:
    admitted = "pagedock:tenant_requests_admitted_total"
    before = metric(tiny_server, admitted, tenant="named-by-a-router")
    assert post(tiny_server, None, **{TENANT_HEADER: "named-by-a-router"}).status_code == 200
    assert metric(tiny_server, admitted, tenant="named-by-a-router") == before + 1
