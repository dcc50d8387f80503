"""Warm start: the router keeps a bounded set of hot prompt prefixes (token ids) and sends them to
a replica that joins while others serve, before it becomes a routing candidate."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from router.kv.hot_prefixes import HotPrefixes
from router.replicas.replica import Replica
from router.replicas.warmer import Warmer
from tests.router.factories import make_config

SHARED = list(range(100, 164))  # 4 blocks of 16: a tenant's system prompt


def test_a_shared_prefix_outranks_the_requests_own_tails() -> None:
    hot = HotPrefixes(max_entries=64, block_size=16)
    for i in range(10):
        hot.record([*SHARED, *range(1000 * i, 1000 * i + 40)], now=0.0)
    [first] = hot.hottest(1, now=0.0)
    assert list(first.token_ids) == SHARED


def test_the_hot_set_is_bounded_and_the_coldest_goes() -> None:
    hot = HotPrefixes(max_entries=4, block_size=16)
    for _ in range(5):
        hot.record(SHARED, now=0.0)
    for i in range(20):
        hot.record(list(range(5000 + 16 * i, 5016 + 16 * i)), now=1.0)
    assert len(hot) == 4
    chosen = [list(p.token_ids) for p in hot.hottest(4, now=1.0)]
    assert SHARED[:16] in chosen or SHARED in chosen


def test_hottest_never_returns_a_prefix_of_another_chosen_one() -> None:
    hot = HotPrefixes(max_entries=64, block_size=16)
    for _ in range(3):
        hot.record(SHARED, now=0.0)
    chosen = hot.hottest(8, now=0.0)
    assert [list(p.token_ids) for p in chosen] == [SHARED]


def test_each_tenants_prefixes_are_kept_and_warmed_under_its_salt() -> None:
    hot = HotPrefixes(max_entries=64, block_size=16)
    for salt in ("tenant:a", "tenant:b", None):
        hot.record(SHARED, now=0.0, cache_salt=salt)
    chosen = hot.hottest(8, now=0.0)
    # The same tokens under other salts are other chains: each is warmed.
    assert {(p.cache_salt, p.token_ids) for p in chosen} == {
        (salt, tuple(SHARED)) for salt in ("tenant:a", "tenant:b", None)
    }


def test_nothing_is_recorded_when_warm_start_is_off() -> None:
    hot = HotPrefixes(max_entries=0, block_size=16)
    hot.record(SHARED)
    assert len(hot) == 0


def test_a_new_replica_is_sent_the_hot_prefixes_as_one_token_completions() -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": []})

    async def run() -> int:
        hot = HotPrefixes(max_entries=64, block_size=16)
        hot.record(SHARED)
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            warmer = Warmer(make_config(warm_prefixes=4), hot, client)
            assert warmer.wants(others_serving=True)
            assert not warmer.wants(others_serving=False)  # the first replica is never held back
            return await warmer.warm(Replica("http://10.0.0.9:8000"))

    assert asyncio.run(run()) == 1
    assert seen == [{"prompt": SHARED, "max_tokens": 1, "temperature": 0}]


def test_a_salted_prefix_is_warmed_with_its_salt() -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": []})

    async def run() -> int:
        hot = HotPrefixes(max_entries=64, block_size=16)
        hot.record(SHARED, cache_salt="tenant:a")
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            warmer = Warmer(make_config(warm_prefixes=4), hot, client)
            return await warmer.warm(Replica("http://10.0.0.9:8000"))

    assert asyncio.run(run()) == 1
    assert seen == [{"prompt": SHARED, "max_tokens": 1, "temperature": 0, "cache_salt": "tenant:a"}]


@pytest.mark.parametrize("fields", [{"warm_prefixes": -1}, {"warm_timeout_s": 0}])
def test_bad_warm_settings_are_refused(fields: dict) -> None:
    from pagedock.errors import ConfigError

    with pytest.raises(ConfigError):
        make_config(**fields)
