"""RedisResponsesStore against a real redis-server (started here, on a free port): lookups by
(tenant, id), the TTL Redis enforces, two stores sharing one Redis, and a 503-able error when
Redis is gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pagedock.responses_store.redis_store import RedisResponsesStore, response_key
from pagedock.responses_store.store import ResponsesStoreError, open_responses_store
from tests.pagedock.responses_store.test_memory_store import record
from tests.redis_server import RedisServer, start_redis

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


async def test_a_stored_response_is_its_tenants_only(redis_server: RedisServer) -> None:
    store = open_responses_store(redis_server.url, 0, 1)
    assert isinstance(store, RedisResponsesStore)
    try:
        await store.put(record("r1", tenant="a"))
        assert await store.get("a", "r1") == record("r1", tenant="a")
        assert await store.get("b", "r1") is None
        assert not await store.delete("b", "r1")
        assert await store.delete("a", "r1")
        assert await store.get("a", "r1") is None
    finally:
        await store.close()


async def test_two_stores_on_one_redis_share_what_is_stored(redis_server: RedisServer) -> None:
    writer, reader = RedisResponsesStore(redis_server.url), RedisResponsesStore(redis_server.url)
    try:
        await writer.put(record("shared"))
        assert await reader.get("a", "shared") == record("shared")
    finally:
        await writer.close()
        await reader.close()


async def test_redis_expires_a_response_after_its_ttl(redis_server: RedisServer) -> None:
    store = RedisResponsesStore(redis_server.url, ttl_s=3600)
    try:
        await store.put(record("ttl"))
        client = redis.Redis.from_url(redis_server.url)
        assert 3500 < client.ttl(response_key("a", "ttl")) <= 3600
        client.close()
    finally:
        await store.close()


async def test_an_unreachable_redis_is_a_store_error_naming_it_without_the_password(
    tmp_path: Path,
) -> None:
    gone = start_redis(tmp_path)
    gone.stop()
    url = f"redis://user:secret@127.0.0.1:{gone.port}/0"
    store = RedisResponsesStore(url)
    try:
        with pytest.raises(ResponsesStoreError) as error:
            await store.get("a", "r1")
    finally:
        await store.close()
    assert f"127.0.0.1:{gone.port}" in str(error.value)
    assert "secret" not in str(error.value)
