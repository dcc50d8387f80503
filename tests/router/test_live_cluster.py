"""The router live on loopback: 3 `pagedock serve` replicas of the tiny model and `pagedock route`
in front of them, as separate processes. Replicas start once for the module; each test starts
the router it needs (a restart costs about a second)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from pagedock.text.tokenizer import Tokenizer
from tests.router.live import (
    Process,
    metric_sum,
    replica_process,
    replica_view,
    router_process,
    wait_synced,
    wait_until,
)
from tests.router.workload import best_possible_hit_tokens, send_all, tenant_turns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Room for about 5 of the 8 tenants' prefixes per replica: prefix-aware routing keeps each
# tenant on one replica (about 3 per replica fit), round-robin makes every replica cycle through
# all 8 and the LRU evicts them before they come back.
NUM_KV_BLOCKS = 60
HITS = "vllm:prefix_cache_hits_total"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_model import make_tiny_llama_dir

    return make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_hf_dir(model_dir)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="module")
def replicas(model_dir: Path, logs: Path) -> Iterator[list[Process]]:
    procs = [replica_process(model_dir, logs, NUM_KV_BLOCKS) for _ in range(3)]
    try:
        for p in procs:
            p.start()
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda p: p.wait_ready(), procs))
        yield procs
    finally:
        for p in procs:
            p.kill()


def start_router(
    model_dir: Path, logs: Path, replicas: list[Process], *extra: str, port: int | None = None
) -> Process:
    router = router_process(model_dir, logs, [r.url for r in replicas], *extra, port=port)
    router.start().wait_ready(timeout_s=30)
    wait_synced(router, [r.url for r in replicas])
    return router


def total_hits(replicas: list[Process]) -> float:
    return sum(metric_sum(r.url, HITS) for r in replicas)


def hit_ratio(router: Process, replicas: list[Process], tokenizer: Tokenizer, seed: int) -> float:
    """Prefix-cache hits (the engines' counters) over the best possible, for a fresh workload."""
    turns = tenant_turns(tokenizer, seed)
    before = total_hits(replicas)
    responses = asyncio.run(send_all(router.url, [t.body for t in turns], concurrency=2))
    assert [r.status_code for r in responses] == [200] * len(turns)
    time.sleep(0.6)  # a scrape interval of the engines' counters
    return (total_hits(replicas) - before) / best_possible_hit_tokens(turns)


def test_prefix_aware_reaches_90_percent_of_best_hit_rate_and_round_robin_far_less(
    model_dir: Path, logs: Path, replicas: list[Process], tokenizer: Tokenizer
) -> None:
    router = start_router(model_dir, logs, replicas, "--policy", "prefix-aware")
    try:
        prefix_aware = hit_ratio(router, replicas, tokenizer, seed=1)
    finally:
        router.kill()
    router = start_router(model_dir, logs, replicas, "--policy", "round-robin")
    try:
        round_robin = hit_ratio(router, replicas, tokenizer, seed=2)
    finally:
        router.kill()
    print(
        f"hit rate / best possible: prefix-aware {prefix_aware:.2f}, round-robin {round_robin:.2f}"
    )
    assert prefix_aware >= 0.9
    assert round_robin <= 0.6
    assert round_robin < prefix_aware - 0.3


def test_shared_prefix_burst_spreads_when_the_balance_threshold_says_so(
    model_dir: Path, logs: Path, replicas: list[Process], tokenizer: Tokenizer
) -> None:
    router = start_router(
        model_dir,
        logs,
        replicas,
        "--balance-abs-threshold-tokens",
        "32",
        "--balance-rel-threshold",
        "1.5",
    )
    try:
        turns = [t for t in tenant_turns(tokenizer, seed=3, num_tenants=1, turns_per_tenant=36)]
        for t in turns:
            t.body["max_tokens"] = 8
        before = [metric_sum(r.url, "vllm:request_success_total") for r in replicas]
        responses = asyncio.run(send_all(router.url, [t.body for t in turns], concurrency=12))
        assert all(r.status_code == 200 for r in responses)
        time.sleep(0.6)
        served = [
            metric_sum(r.url, "vllm:request_success_total") - b
            for r, b in zip(replicas, before, strict=True)
        ]
    finally:
        router.kill()
    assert sum(served) == len(turns)
    # Affinity alone would send all 36 turns to the one replica holding the tenant's prefix. How
    # evenly the guard spreads them depends on when each replica answers (a CI run saw 9/20/7),
    # so the test asks for a spread, not for a particular one: every replica takes a real share
    # (on a loaded machine a CI run saw 4/15/17).
    assert max(served) <= 0.6 * len(turns), served
    assert min(served) >= len(turns) / 9, served


def test_bad_input_gets_the_engines_own_errors_and_4xx_is_not_retried(
    model_dir: Path, logs: Path, replicas: list[Process]
) -> None:
    router = start_router(model_dir, logs, replicas)
    bad_requests = [
        ("/v1/chat/completions", b'{"messages": []}'),
        ("/v1/chat/completions", b"{not json"),
        ("/v1/completions", b'{"prompt": "hi", "max_tokens": -1}'),
        ("/v1/completions", b'{"prompt": "hi", "model": "no-such-model"}'),
        ("/v1/completions", b'{"prompt": [999999], "max_tokens": 2}'),
    ]
    try:
        for path, body in bad_requests:
            headers = {"content-type": "application/json"}
            direct = httpx.post(replicas[0].url + path, content=body, headers=headers)
            routed = httpx.post(router.url + path, content=body, headers=headers)
            assert 400 <= routed.status_code < 500, routed.text
            if b"no-such-model" in body:
                # The router knows the served models (/v1/models) and refuses in the engine's
                # shape and status itself, naming what the replicas serve.
                routed_error, direct_error = routed.json()["error"], direct.json()["error"]
                assert "does not exist; the replicas serve '" in routed_error.pop("message")
                direct_error.pop("message")
                assert (routed.status_code, routed_error) == (direct.status_code, direct_error)
                continue
            assert (routed.status_code, routed.json()) == (direct.status_code, direct.json())
        assert metric_sum(router.url, "pagedock_router_retries_total") == 0
        assert all(v["healthy"] for v in replica_view(router).values())
    finally:
        router.kill()


def test_streams_pass_through_event_by_event(
    model_dir: Path, logs: Path, replicas: list[Process]
) -> None:
    router = start_router(model_dir, logs, replicas)
    body = {"prompt": "paged attention", "max_tokens": 24, "stream": True, "ignore_eos": True}
    try:
        events = []
        with httpx.stream(
            "POST", router.url + "/v1/completions", json=body, timeout=30
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
        assert events[-1] == "[DONE]"
        texts = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
        assert len(texts) >= 2 and all(isinstance(t, str) for t in texts)
    finally:
        router.kill()


def test_router_restart_rebuilds_its_cache_view_from_snapshots(
    model_dir: Path, logs: Path, replicas: list[Process], tokenizer: Tokenizer
) -> None:
    turns = tenant_turns(tokenizer, seed=4, num_tenants=4, turns_per_tenant=6)
    first, second = turns[:12], turns[12:]
    router = start_router(model_dir, logs, replicas)
    port = router.port
    try:
        asyncio.run(send_all(router.url, [t.body for t in first], concurrency=2))
    finally:
        router.kill()
    restarted_at = time.monotonic()
    router = start_router(model_dir, logs, replicas, port=port)
    try:
        rebuilt_s = time.monotonic() - restarted_at
        # Every tenant is cached somewhere already: the new router must send each to its holder.
        seen = {t.tenant for t in first}
        again = [t for t in second if t.tenant in seen]
        responses = asyncio.run(send_all(router.url, [t.body for t in again], concurrency=2))
        cached = [r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] for r in responses]
    finally:
        router.kill()
    assert rebuilt_s < 10
    assert all(c >= 10 * 16 for c in cached), cached


def test_a_killed_replica_leaves_at_once_requests_are_retried_and_it_rejoins_from_its_snapshot(
    model_dir: Path, logs: Path, replicas: list[Process], tokenizer: Tokenizer
) -> None:
    router = start_router(model_dir, logs, replicas)
    victim = replicas[2]
    try:
        turns = tenant_turns(tokenizer, seed=5, num_tenants=6, turns_per_tenant=8)
        bodies = [t.body for t in turns]

        async def run_and_kill() -> list[httpx.Response]:
            load = asyncio.ensure_future(send_all(router.url, bodies, concurrency=4))
            await asyncio.sleep(0.5)
            victim.kill()
            return await load

        killed_at = time.monotonic()
        responses = asyncio.run(run_and_kill())
        assert [r.status_code for r in responses] == [200] * len(bodies)
        view = wait_until(
            lambda: (v := replica_view(router)[victim.url]) and not v["healthy"] and v, timeout_s=2
        )
        assert time.monotonic() - killed_at < 0.5 + 1.0 + 5  # kill, one health interval, the load
        assert view["cached_blocks"] == 0
        old_instance = view["instance_id"]

        victim.start().wait_ready()
        wait_synced(router, [victim.url], timeout_s=10)
        view = replica_view(router)[victim.url]
        assert view["instance_id"] != old_instance
        responses = asyncio.run(send_all(router.url, bodies[:6], concurrency=3))
        assert all(r.status_code == 200 for r in responses)
    finally:
        router.kill()
