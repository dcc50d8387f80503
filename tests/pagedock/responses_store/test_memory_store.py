"""MemoryResponsesStore: lookups by (tenant, id), least recently used out beyond its count, expiry
after its TTL (a clock the test moves, never a sleep)."""

from __future__ import annotations

import pytest

from pagedock.errors import ConfigError
from pagedock.responses_store.memory_store import MemoryResponsesStore
from pagedock.responses_store.store import open_responses_store
from pagedock.responses_store.stored_response import StoredResponse


def record(response_id: str, tenant: str = "a") -> StoredResponse:
    output = [{"type": "message", "id": f"msg_{response_id}", "role": "assistant", "content": []}]
    return StoredResponse(
        id=response_id,
        tenant=tenant,
        response={"id": response_id, "output": output},
        input_items=[{"type": "message", "id": "in", "role": "user", "content": []}],
        history=[{"type": "message", "id": "old", "role": "user", "content": []}],
    )


@pytest.mark.asyncio
async def test_a_stored_response_is_its_tenants_only() -> None:
    store = MemoryResponsesStore(10)
    await store.put(record("r1", tenant="a"))
    assert await store.get("a", "r1") == record("r1", tenant="a")
    assert await store.get("b", "r1") is None
    assert not await store.delete("b", "r1")
    assert await store.delete("a", "r1")
    assert await store.get("a", "r1") is None


@pytest.mark.asyncio
async def test_the_conversation_is_history_then_input_then_output() -> None:
    conversation = record("r1").conversation()
    assert [item["id"] for item in conversation] == ["old", "in", "msg_r1"]


@pytest.mark.asyncio
async def test_the_least_recently_used_goes_beyond_the_count() -> None:
    store = MemoryResponsesStore(2)
    await store.put(record("r1"))
    await store.put(record("r2"))
    assert await store.get("a", "r1") is not None  # r2 is now the least recently used
    await store.put(record("r3"))
    assert len(store) == 2
    assert await store.get("a", "r2") is None
    assert await store.get("a", "r1") is not None and await store.get("a", "r3") is not None


@pytest.mark.asyncio
async def test_a_response_expires_after_its_ttl() -> None:
    now = [100.0]
    store = MemoryResponsesStore(10, ttl_s=60, clock=lambda: now[0])
    await store.put(record("r1"))
    now[0] = 159.0
    assert await store.get("a", "r1") is not None
    now[0] = 160.0
    assert await store.get("a", "r1") is None


@pytest.mark.asyncio
async def test_what_the_caller_changes_later_is_not_stored() -> None:
    store = MemoryResponsesStore(10)
    kept = record("r1")
    await store.put(kept)
    kept.response["output"].clear()
    read = await store.get("a", "r1")
    assert read is not None and read.response["output"]
    read.history.clear()
    again = await store.get("a", "r1")
    assert again is not None and again.history


def test_the_url_picks_the_store_and_a_bad_one_names_the_flag() -> None:
    assert isinstance(open_responses_store("memory", 0, 5), MemoryResponsesStore)
    with pytest.raises(ConfigError, match="--responses-store"):
        open_responses_store("postgres://db", 0, 5)
    with pytest.raises(ConfigError, match="--responses-store-max-entries"):
        MemoryResponsesStore(0)
