"""A request's hold on its tenant's quota (engine/server/openai/tenant_admission.py), on a clock
the test sets: the 429s in OpenAI's shape, served again once the window allows, exact counts."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from engine.server.tenancy import tenant_admission
from engine.server.tenancy.tenant_admission import TenantAdmission
from engine.server.tenancy.tenant_metrics import TenantMetrics
from pagedock.http.errors import APIError
from pagedock.tenancy.quota_store import MemoryQuotaStore, QuotaStore
from pagedock.tenancy.tenants import Tenant


def admit_tenant(
    store: QuotaStore,
    metrics: TenantMetrics,
    tenant: Tenant,
    priority: int,
    tokens: int,
    now: float,
) -> TenantAdmission:
    return asyncio.run(tenant_admission.admit_tenant(store, metrics, tenant, priority, tokens, now))


def metrics() -> tuple[TenantMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return TenantMetrics(registry, "tiny"), registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, {"model_name": "tiny", **labels}) or 0.0


def test_over_its_requests_per_minute_a_tenant_gets_a_429_until_the_window_allows() -> None:
    book, (tenant_metrics, registry) = MemoryQuotaStore(), metrics()
    sweep = Tenant("sweep", requests_per_minute=2)
    for _ in range(2):
        admit_tenant(book, tenant_metrics, sweep, 0, 10, now=0.0).finish(3, now=0.0)
    with pytest.raises(APIError) as refused:
        admit_tenant(book, tenant_metrics, sweep, 0, 10, now=1.0)
    error = refused.value
    assert (error.status_code, error.code) == (429, "requests_per_minute_exceeded")
    assert error.headers["retry-after"] == "29"  # one request back every 30 s
    assert error.headers["x-ratelimit-limit-requests"] == "2"
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    admitted = admit_tenant(book, tenant_metrics, sweep, 0, 10, now=30.0)  # one is back
    assert admitted.headers(now=30.0)["x-ratelimit-remaining-requests"] == "0"
    reason = "requests_per_minute_exceeded"
    assert sample(
        registry, "pagedock:tenant_requests_rejected_total", tenant="sweep", reason=reason
    )
    assert sample(registry, "pagedock:tenant_requests_admitted_total", tenant="sweep", priority="0")


def test_completion_tokens_overdraw_the_bucket_and_the_refill_pays_the_debt() -> None:
    book, (tenant_metrics, registry) = MemoryQuotaStore(), metrics()
    metered = Tenant("metered", tokens_per_minute=600)  # 10 tokens a second
    admit_tenant(book, tenant_metrics, metered, 0, 100, now=0.0).finish(700, now=0.0)
    with pytest.raises(APIError) as refused:
        admit_tenant(book, tenant_metrics, metered, 0, 50, now=0.0)
    assert refused.value.code == "tokens_per_minute_exceeded"
    assert refused.value.headers["retry-after"] == "25"  # 200 of debt, then the 50 asked for
    admit_tenant(book, tenant_metrics, metered, 0, 50, now=25.0)
    assert book.book.of(metered).tokens_served == 850
    assert sample(registry, "pagedock:tenant_prompt_tokens_total", tenant="metered") == 150
    assert sample(registry, "pagedock:tenant_generation_tokens_total", tenant="metered") == 700


def test_a_prompt_larger_than_a_minutes_tokens_is_never_retried() -> None:
    book, (tenant_metrics, _) = MemoryQuotaStore(), metrics()
    small = Tenant("small", tokens_per_minute=100)
    with pytest.raises(APIError) as refused:
        admit_tenant(book, tenant_metrics, small, 0, 101, now=0.0)
    assert refused.value.code == "request_too_large"
    assert refused.value.headers["x-should-retry"] == "false"


def test_a_request_is_finished_once_and_gives_its_concurrency_back() -> None:
    book, (tenant_metrics, registry) = MemoryQuotaStore(), metrics()
    single = Tenant("single", max_concurrency=1)
    admission = admit_tenant(book, tenant_metrics, single, 0, 5, now=0.0)
    with pytest.raises(APIError, match="requests under way"):
        admit_tenant(book, tenant_metrics, single, 0, 5, now=0.0)
    admission.finish(4)
    admission.finish(4)  # every way a request ends calls it: counted once
    assert book.book.of(single).in_flight == 0
    assert sample(registry, "pagedock:tenant_generation_tokens_total", tenant="single") == 4
    admit_tenant(book, tenant_metrics, single, 0, 5, now=0.0)


def test_a_priority_label_names_only_the_priorities_tenants_run_at() -> None:
    tenant_metrics, registry = metrics()
    tenant_metrics.set_known_priorities({10})
    tenant_metrics.observe_queue_time("sweep", 10, 0.5)
    tenant_metrics.observe_queue_time("sweep", 12345, 0.5)
    count = "pagedock:tenant_queue_time_seconds_count"
    assert sample(registry, count, tenant="sweep", priority="10") == 1
    assert sample(registry, count, tenant="sweep", priority="other") == 1
