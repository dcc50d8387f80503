"""Adapter affinity end to end: two live `pagedock serve` replicas serving a LoRA adapter behind a
live `pagedock route`, followed through pagedock's KV events and through vLLM's. The router's
hashes of an adapter's prompt, chained from the adapter's root, meet the blocks the engine
announces on its KV events, so the adapter's second request is predicted its cached prefix on the
replica that computed it, and the same prompt for the base model is predicted nothing there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
    """The fleet, its replicas followed through pagedock's NDJSON events or vLLM's ZMQ ones."""
    from tests.engine.lora_factories import make_peft_adapter
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))
    adapter_dir = tmp_path_factory.mktemp("adapters") / "sql"
    adapter = make_peft_adapter(
        model, adapter_dir, r=4, lora_alpha=8, target_modules=("q_proj", "v_proj")
    )
    logs = tmp_path_factory.mktemp("logs")
    replicas = [replica_process(model, logs, 256) for _ in range(2)]
    # No pending blocks: a predicted hit can only come from the engine's own KV events.
    routed = ["--pending-prefix-ttl-s", "0"]
    for r in replicas:
        r.args += ["--enable-lora", "--lora-modules", f"sql={adapter}"]
        if request.param == "vllm":
            routed += ["--vllm-replica", f"{r.url}@{vllm_events(r)}"]
    urls = [] if request.param == "vllm" else [r.url for r in replicas]
    router = router_process(model, logs, urls, *routed)
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
        router.start().wait_ready(timeout_s=30)
        wait_until(lambda: all(ready(v) for v in replica_view(router).values()), 30)
        yield router
    finally:
        for p in [router, *replicas]:
            p.kill()


def ready(view: dict[str, Any]) -> bool:
    return bool(view["healthy"] and view["kv_synced"] and "sql" in (view["served_models"] or ()))


def complete(router: Process, **fields: Any) -> httpx.Response:
    body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0, **fields}
    response = httpx.post(router.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response


def test_an_adapters_second_request_finds_its_prefix_and_the_base_model_does_not(
    router: Process,
) -> None:
    first = complete(router, model="sql")
    replica = first.headers[REPLICA_HEADER]
    assert first.headers[PREDICTED_CACHED_HEADER] == "0"
    # The engine's stored events for the adapter's blocks reach the router's index.
    wait_until(lambda: replica_view(router)[replica]["cached_blocks"] >= CACHED // 16, 30)
    second = complete(router, model="sql")
    assert (second.headers[REPLICA_HEADER], second.headers[PREDICTED_CACHED_HEADER]) == (
        replica,
        str(CACHED),
    )
    base = complete(router)  # the same tokens on the base model's chain: nothing cached
    assert base.headers[PREDICTED_CACHED_HEADER] == "0"


def test_the_router_lists_the_fleets_adapters_and_refuses_an_unknown_one(router: Process) -> None:
    listed = httpx.get(router.url + "/v1/models", timeout=10).json()["data"]
    base, *adapters = listed
    assert base["parent"] is None
    assert [(a["id"], a["parent"]) for a in adapters] == [("sql", base["id"])]
    refused = httpx.post(
        router.url + "/v1/completions", json={"prompt": PROMPT, "model": "nope"}, timeout=10
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "model_not_found")
