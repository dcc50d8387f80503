"""RedisQuotaStore against a real redis-server (started here, on a free port): two stores stand
for two routers of one fleet, and their tenants' limits hold across both, exactly, however many
requests they admit at once; the answers are the memory store's; a router that dies leaves its
leases to expire; a store that does not answer refuses (503) rather than waive the limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager

import pytest

from pagedock.tenancy.quota import QuotaExceeded
from pagedock.tenancy.quota_store import Lease, QuotaStore, QuotaStoreUnavailable, open_quota_store
from pagedock.tenancy.redis_quota import RedisQuotaStore, _redacted
from pagedock.tenancy.tenants import Tenant
from tests.redis_server import RedisServer, start_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def url(redis_server: RedisServer) -> Iterator[str]:
    import redis

    yield redis_server.url
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    client.close()


async def admitted(store: QuotaStore, tenant: Tenant, tokens: int = 1) -> Lease | str:
    """The lease, or the refusal's code."""
    try:
        return await store.admit(tenant, tokens)
    except QuotaExceeded as e:
        return e.refusal.code


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.05)


async def eventually_admitted(store: QuotaStore, tenant: Tenant, timeout_s: float = 10.0) -> Lease:
    deadline = time.monotonic() + timeout_s
    while isinstance(answer := await admitted(store, tenant), str):
        assert time.monotonic() < deadline, f"still refused: {answer}"
        await asyncio.sleep(0.05)
    return answer


@asynccontextmanager
async def routers(url: str, lease_ttl_s: float = 30.0) -> AsyncIterator[list[RedisQuotaStore]]:
    """Two stores on one Redis: two routers of a fleet."""
    stores = [RedisQuotaStore(url, lease_ttl_s), RedisQuotaStore(url, lease_ttl_s)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


def test_requests_per_minute_hold_exactly_across_two_routers_admitting_at_once(url: str) -> None:
    tenant = Tenant("sweep", requests_per_minute=20)

    async def run() -> None:
        async with routers(url) as (a, b):
            answers = await asyncio.gather(
                *(admitted(a if i % 2 else b, tenant) for i in range(60))
            )
            leases = [x for x in answers if not isinstance(x, str)]
            assert len(leases) == 20
            assert {x for x in answers if isinstance(x, str)} == {"requests_per_minute_exceeded"}
            with pytest.raises(QuotaExceeded) as refused:
                await a.admit(tenant, 1)
            headers = refused.value.refusal.headers
            assert headers["x-ratelimit-limit-requests"] == "20"
            assert headers["x-ratelimit-remaining-requests"] == "0"
            assert headers["retry-after"] == "3"  # one request is back every 3 s

    asyncio.run(run())


def test_completion_tokens_overdraw_the_shared_bucket_until_the_refill_pays_the_debt(
    url: str,
) -> None:
    tenant = Tenant("metered", tokens_per_minute=60_000)  # 1,000 tokens a second

    async def run() -> None:
        async with routers(url) as (a, b):
            lease = await a.admit(tenant, 10_000)
            assert lease.headers()["x-ratelimit-remaining-tokens"] == "50000"
            lease.finish(50_500)  # 500 tokens of debt, counted in the background
            await eventually(lambda: _refused_with(b, tenant, "tokens_per_minute_exceeded"))
            with pytest.raises(QuotaExceeded) as refused:
                await b.admit(tenant, 1)
            assert refused.value.refusal.headers["retry-after"] == "1"
            await eventually(lambda: _admits(b, tenant))  # served again when the window allows
            with pytest.raises(QuotaExceeded) as too_large:
                await b.admit(tenant, 60_001)
            assert too_large.value.refusal.code == "request_too_large"
            assert too_large.value.refusal.headers["x-should-retry"] == "false"

    asyncio.run(run())


def test_concurrency_holds_across_routers_and_comes_back_when_a_request_ends(url: str) -> None:
    tenant = Tenant("single", max_concurrency=2)

    async def run() -> None:
        async with routers(url) as (a, b):
            first, second = await a.admit(tenant, 1), await b.admit(tenant, 1)
            assert await admitted(a, tenant) == "concurrency_limit_exceeded"
            second.finish(3)
            second.finish(3)  # every way a request ends calls it: given back once
            third = await eventually_admitted(a, tenant)
            assert await admitted(b, tenant) == "concurrency_limit_exceeded"
            first.finish()
            third.finish()

    asyncio.run(run())


def test_a_router_that_dies_leaves_its_leases_to_expire_and_a_live_one_renews_its_own(
    url: str,
) -> None:
    tenant = Tenant("held", max_concurrency=1)

    async def run() -> None:
        async with routers(url, lease_ttl_s=1.5) as (live, other):
            lease = await live.admit(tenant, 1)
            # Held across three lease lifetimes: renewed, never taken by the other router.
            deadline = time.monotonic() + 4.5
            while time.monotonic() < deadline:
                assert await admitted(other, tenant) == "concurrency_limit_exceeded"
                await asyncio.sleep(0.1)
            lease.finish()
            await eventually(lambda: _admits(other, tenant))
        dead = RedisQuotaStore(url, lease_ttl_s=1.5)
        await dead.admit(tenant, 1)
        await dead.close()  # it stops renewing, as a killed router would, its lease unfinished
        async with routers(url) as (survivor, _):
            assert await admitted(survivor, tenant) == "concurrency_limit_exceeded"
            await eventually_admitted(survivor, tenant, timeout_s=5.0)

    asyncio.run(run())


def test_a_store_that_does_not_answer_refuses_rather_than_waives_the_limits(
    redis_server: RedisServer,
) -> None:
    dead_url = f"redis://:s3cret@127.0.0.1:{redis_server.port + 1}/0"  # nothing listens there

    async def run() -> None:
        store = open_quota_store(dead_url)
        with pytest.raises(QuotaStoreUnavailable):
            await store.admit(Tenant("any", requests_per_minute=5), 1)
        await store.close()

    asyncio.run(run())
    assert _redacted(dead_url) == f"redis://***@127.0.0.1:{redis_server.port + 1}/0"


def test_a_tenant_without_limits_is_admitted_with_no_headers(url: str) -> None:
    async def run() -> None:
        async with routers(url) as (a, _):
            lease = await a.admit(Tenant("free"), 10**6)
            assert lease.headers() == {}
            lease.finish(10**6)

    asyncio.run(run())


async def _admits(store: QuotaStore, tenant: Tenant) -> bool:
    answer = await admitted(store, tenant)
    if isinstance(answer, str):
        return False
    answer.finish()
    return True


async def _refused_with(store: QuotaStore, tenant: Tenant, code: str) -> bool:
    answer = await admitted(store, tenant)
    if isinstance(answer, str):
        return answer == code
    answer.finish()
    return False
