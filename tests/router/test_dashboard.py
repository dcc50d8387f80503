"""The router's web view: the fleet snapshot it draws (replicas, their cache by prefix, recent
decisions; bounded whatever the cache holds), the feed that shares one snapshot between viewers
and caps them, and the routes: the page open to all, its data behind the router's key."""

from __future__ import annotations

import asyncio
import gc
import json
import tomllib
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from router.dashboard.fleet_snapshot import fleet_snapshot, prefix_name
from router.dashboard.snapshot_feed import SnapshotFeed, TooManyViewers
from router.kv.kv_index import KVIndex
from router.policies.decision_log import DecisionLog
from router.replicas.replica import Replica
from tests.router.factories import h, make_candidate, make_config
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router
from tests.router.live import ROOT

pytestmark = pytest.mark.timeout(60)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fleet() -> tuple[dict[str, Replica], KVIndex, DecisionLog]:
    b, a = Replica("http://b:8000"), Replica("http://a:8000")  # listed by URL
    a.load.num_requests_running, a.load.num_requests_waiting = 2, 1
    a.load.kv_cache_usage, a.load.num_gpu_blocks = 0.25, 600
    a.load.prefix_cache_hits, a.load.prefix_cache_queries = 30, 120
    index = KVIndex()
    index.store(a.url, [h(1), h(2), h(3)], parent=None)
    index.store(a.url, [h(4)], parent=h(3))
    index.store(b.url, [h(9)], parent=None)
    index.store(b.url, [h(50)])  # untraced
    log = DecisionLog()
    candidates = [make_candidate(a.url, cached_tokens=48, queued_tokens=10), make_candidate(b.url)]
    log.record("req-1", a.url, "affinity", 48, 64, h(1), candidates, "tiny")
    return {r.url: r for r in (b, a)}, index, log


def test_the_snapshot_lists_each_replicas_load_and_its_blocks_by_prefix() -> None:
    replicas, index, log = fleet()
    snapshot = fleet_snapshot(make_config(), replicas, index, log)
    a, b = snapshot["replicas"]
    assert [r["url"] for r in snapshot["replicas"]] == ["http://a:8000", "http://b:8000"]
    assert a["num_requests_running"] == 2 and a["num_requests_waiting"] == 1
    assert a["kv_cache_usage"] == 0.25 and a["num_gpu_blocks"] == 600
    assert a["prefix_cache_hit_rate"] == 0.25
    assert a["cached_blocks"] == 4
    assert a["groups"] == [{"prefix": prefix_name(h(1)), "blocks": 4}]
    assert len(prefix_name(h(1))) == 12
    assert b["groups"] == [{"prefix": prefix_name(h(9)), "blocks": 1}]
    assert b["untraced_blocks"] == 1
    assert b["prefix_cache_hit_rate"] is None  # no queries yet


def test_the_snapshot_lists_recent_decisions_with_their_candidates_scores() -> None:
    replicas, index, log = fleet()
    snapshot = fleet_snapshot(make_config(prefill_ms_per_token=0.5), replicas, index, log)
    [decision] = snapshot["decisions"]
    assert decision["request_id"] == "req-1"
    assert decision["replica"] == "http://a:8000"
    assert decision["reason"] == "affinity"
    assert decision["prefix"] == prefix_name(h(1))
    assert decision["predicted_cached_tokens"] == 48
    first, second = decision["candidates"]
    assert first["estimated_ttft_ms"] == 0.5 * (10 + 64 - 48)
    assert second["estimated_ttft_ms"] == 0.5 * 64


def test_a_snapshot_of_thousands_of_prefixes_stays_small() -> None:
    replicas, _, log = fleet()
    index, url = KVIndex(), "http://a:8000"
    for i in range(1000, 5000):  # 4,000 prefixes of 4 blocks
        index.store(url, [h(10 * i + j) for j in range(4)], parent=None)
    for i in range(200):
        log.record(f"r{i}", url, "load", 0, 10, None, [make_candidate(url)] * 20)
    snapshot = fleet_snapshot(make_config(), replicas, index, log, max_groups=48)
    a = snapshot["replicas"][0]
    assert len(a["groups"]) == 48
    assert a["other_groups"] == 4000 - 48 and a["other_blocks"] == 4 * (4000 - 48)
    assert len(snapshot["decisions"]) == 30
    assert len(json.dumps(snapshot)) < 64_000  # 30 decisions of 8 candidates: most of it


def test_the_feed_builds_once_per_interval_whoever_asks() -> None:
    clock, builds = Clock(), iter(range(10))
    feed = SnapshotFeed(lambda: {"n": next(builds)}, 0.5, clock=clock)
    assert json.loads(feed.current()) == {"n": 0}
    clock.now += 0.3
    assert json.loads(feed.current()) == {"n": 0}
    clock.now += 0.3
    assert json.loads(feed.current()) == {"n": 1}
    assert feed.num_builds == 2


@pytest.mark.asyncio
async def test_viewers_are_capped_and_a_stream_gone_frees_its_slot() -> None:
    feed = SnapshotFeed(lambda: {"ok": True}, interval_s=0.01, max_viewers=2)
    first, second = feed.join(), feed.join()
    with pytest.raises(TooManyViewers):
        feed.join()
    assert (await anext(first)).startswith(b"event: snapshot\ndata: {")
    await first.aclose()  # type: ignore[attr-defined]
    del first, second  # `second` was never started (a client that left at once)
    gc.collect()
    assert feed.viewers == 0
    third = feed.join()
    assert b'"ok":true' in await anext(third)
    await third.aclose()  # type: ignore[attr-defined]
    await asyncio.sleep(0)


@pytest.fixture()
def router_with_key() -> Iterator[str]:
    with ExitStack() as stack:
        fake = FakeReplica("ok")
        replica = stack.enter_context(ServerThread(fake.app))
        yield serve_router(stack, [replica.url], api_key="sesame")


def test_the_page_is_open_and_its_data_needs_the_routers_key(router_with_key: str) -> None:
    url = router_with_key
    page = httpx.get(url + "/dashboard", timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert "/events" in page.text and "Authorization" in page.text
    for path in ("/dashboard/state", "/dashboard/events"):
        refused = httpx.get(url + path, timeout=10)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
    state = httpx.get(url + "/dashboard/state", headers=auth(), timeout=10)
    assert state.status_code == 200
    assert [r["url"] for r in state.json()["replicas"]] != []


def auth() -> dict[str, str]:
    return {"Authorization": "Bearer sesame"}


def test_the_event_stream_sends_the_snapshot(router_with_key: str) -> None:
    with httpx.stream(
        "GET", router_with_key + "/dashboard/events", headers=auth(), timeout=10
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        frame = first_frame(response)
    assert frame["event"] == "snapshot"
    assert len(json.loads(frame["data"])["replicas"]) == 1


def first_frame(response: httpx.Response) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            return fields
        name, _, value = line.partition(": ")
        fields[name] = value
    raise AssertionError(f"the stream ended after {fields}")


def test_the_page_ships_in_the_wheel() -> None:
    """The router image installs the wheel: the page must be its package data."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    assert "*.html" in package_data.get("router.dashboard", []), (
        'pyproject.toml needs `"router.dashboard" = ["*.html"]` in [tool.setuptools.package-data]'
    )
