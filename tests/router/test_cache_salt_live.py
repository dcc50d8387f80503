"""Tenant isolation end to end: a live `pagedock serve` replica behind a live `pagedock route` that
salts by tenant, followed through pagedock's KV events and through vLLM's. A tenant's second
request is predicted, and finds, its cached prefix; another tenant's identical prompt finds
nothing, in the router's view and in the engine's `usage.prompt_tokens_details.cached_tokens`."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from router.http.proxy import PREDICTED_CACHED_HEADER, REPLICA_HEADER
from tests.router.live import (
    Process,
    replica_process,
    replica_view,
    router_process,
    vllm_events,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
PROMPT = list(range(3, 103))  # 100 token ids: six full blocks of 16
CACHED = 96


@pytest.fixture(scope="module", params=["pagedock", "vllm"])
def router(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """One replica, followed through pagedock's NDJSON events or vLLM's ZMQ ones; clients are
    told apart by the bearer key they present (the replica needs none)."""
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))
    logs = tmp_path_factory.mktemp("logs")
    replica = replica_process(model, logs, 256)
    # No pending blocks: a predicted hit can only come from the engine's own KV events.
    routed = ["--pending-prefix-ttl-s", "0", "--cache-salt-by-tenant"]
    if request.param == "vllm":
        routed += ["--vllm-replica", f"{replica.url}@{vllm_events(replica)}"]
    router = router_process(model, logs, [] if request.param == "vllm" else [replica.url], *routed)
    try:
        replica.start().wait_ready()
        router.start().wait_ready(timeout_s=30)
        wait_until(lambda: all(v["healthy"] and v["kv_synced"] for v in views(router)), 30)
        yield router
    finally:
        for p in (router, replica):
            p.kill()


def views(router: Process) -> list[dict[str, object]]:
    return list(replica_view(router).values())


def complete(router: Process, key: str) -> tuple[int, int, str]:
    """(predicted cached tokens, the engine's cached tokens, the replica) for PROMPT, sent with
    the bearer key `key`."""
    body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
    headers = {"authorization": f"Bearer {key}"}
    response = httpx.post(router.url + "/v1/completions", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    cached = response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    return int(response.headers[PREDICTED_CACHED_HEADER]), cached, response.headers[REPLICA_HEADER]


def test_a_tenants_prefix_is_found_by_that_tenant_only(router: Process) -> None:
    predicted, cached, replica = complete(router, "tenant-a")
    assert (predicted, cached) == (0, 0)
    # The engine's stored events for the salted blocks reach the router's index.
    wait_until(lambda: replica_view(router)[replica]["cached_blocks"] >= CACHED // 16, 30)
    assert complete(router, "tenant-a")[:2] == (CACHED, CACHED)
    assert complete(router, "tenant-b")[:2] == (0, 0)
    # Its own chain, cached now beside tenant-a's.
    wait_until(lambda: replica_view(router)[replica]["cached_blocks"] >= 2 * CACHED // 16, 30)
    assert complete(router, "tenant-b")[:2] == (CACHED, CACHED)
