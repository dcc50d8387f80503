"""A fleet serving LoRA adapters, through the router over HTTP: stand-in replicas list their base
model and adapters in GET /v1/models (and load and unload them at run time); the router routes an
adapter's requests only to replicas serving it, answers 404 for a model none serves, lists the
fleet's models, and fails over only among the adapter's replicas."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.router.fake_replica import FakeReplica, ServerThread, serve_router
from tests.router.live import free_port, metric_sum

pytestmark = pytest.mark.timeout(60)
PROMPT = {"prompt": "hello", "max_tokens": 4}
REPLICA_HEADER = "x-pagedock-replica"


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def start(stack: ExitStack, *fakes: FakeReplica) -> list[str]:
    return [stack.enter_context(ServerThread(f.app)).url for f in fakes]


def replicas(router: str) -> dict[str, dict[str, Any]]:
    body = httpx.get(router + "/router/replicas", timeout=5).json()
    return {r["url"]: r for r in body["replicas"]}


def until(check: Callable[[], Any], seen: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """Poll `check` until it is truthy; on the deadline, fail with what `seen` shows."""
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s; last seen: {seen()}"
        time.sleep(0.05)
    return result


def wait_for_lists(router: str, urls: list[str], **lists: list[str]) -> None:
    """Until the router has read each replica's model list (as `lists[url]`, when given)."""

    def known() -> bool:
        view = replicas(router)
        return all(
            view[u]["healthy"]
            and view[u]["served_models"] is not None
            and (u not in lists or view[u]["served_models"] == sorted(lists[u]))
            for u in urls
        )

    until(known, lambda: {u: r["served_models"] for u, r in replicas(router).items()})


def demand(router: str) -> dict[str, Any]:
    return httpx.get(router + "/router/demand", timeout=5).json()  # type: ignore[no-any-return]


def complete(router: str, model: str | None = None, **extra: Any) -> httpx.Response:
    body = {**PROMPT, **({"model": model} if model else {}), **extra}
    return httpx.post(router + "/v1/completions", json=body, timeout=10)


@pytest.mark.parametrize("kind", ["pagedock", "vllm"])
def test_an_adapters_requests_go_only_to_the_replicas_serving_it(
    stack: ExitStack, kind: str
) -> None:
    with_sql, base_only = FakeReplica(adapters={"sql": "/a/sql"}), FakeReplica()
    urls = start(stack, with_sql, base_only)
    fleet: dict[str, Any] = {"policy": "round-robin"}
    if kind == "vllm":  # vLLM-format replicas: ZMQ events (none here), the same model lists
        fleet.update(vllm_replicas=urls, kv_events_port=free_port(), kv_replay_port=0)
    router = serve_router(stack, [] if kind == "vllm" else urls, **fleet)
    wait_for_lists(router, urls)
    assert {r["kind"] for r in replicas(router).values()} == {kind}
    answers = [complete(router, "sql") for _ in range(6)]
    assert {(a.status_code, a.headers[REPLICA_HEADER]) for a in answers} == {(200, urls[0])}
    assert with_sql.models_seen == ["sql"] * 6 and base_only.calls == 0
    bases = {complete(router).headers[REPLICA_HEADER] for _ in range(4)}
    assert bases == set(urls)
    assert metric_sum(router, "pagedock_router_lora_requests_total") == 6


def test_a_model_no_replica_serves_is_a_404_in_openais_shape(stack: ExitStack) -> None:
    fakes = FakeReplica(adapters={"sql": "/a/sql"}), FakeReplica()
    urls = start(stack, *fakes)
    router = serve_router(stack, urls)
    wait_for_lists(router, urls)
    answer = complete(router, "nope")
    assert answer.status_code == 404
    assert REPLICA_HEADER not in answer.headers  # the router's own answer, no replica asked
    error = answer.json()["error"]
    assert (error["code"], error["type"], error["param"]) == (
        "model_not_found",
        "not_found_error",
        "model",
    )
    assert "'nope'" in error["message"] and "'sql'" in error["message"]
    assert sum(f.calls for f in fakes) == 0


def test_an_adapter_loaded_since_the_last_check_is_served_at_once(stack: ExitStack) -> None:
    """A request naming a model no list has makes the router read the lists again before its 404:
    an adapter whose status just turned Ready is served, not refused until the next check."""
    with_sql, base_only = FakeReplica(), FakeReplica()
    urls = start(stack, with_sql, base_only)
    router = serve_router(stack, urls, health_interval_s=3600.0)  # one check, at the start
    wait_for_lists(router, urls)
    with_sql.adapters["sql"] = "/a/sql"  # as /v1/load_lora_adapter, after the check
    answer = complete(router, "sql")
    assert answer.status_code == 200, answer.text
    assert answer.headers[REPLICA_HEADER] == urls[0]
    assert replicas(router)[urls[0]]["served_models"] == ["fake", "sql"]


def test_requests_for_unknown_models_read_the_lists_a_bounded_number_of_times(
    stack: ExitStack,
) -> None:
    fake = FakeReplica()
    urls = start(stack, fake)
    router = serve_router(stack, urls, health_interval_s=3600.0)
    wait_for_lists(router, urls)
    asked = fake.models_asked
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: complete(router, "nope").status_code, range(64)))
    elapsed = time.monotonic() - started
    assert answers == [404] * 64
    # One read in flight at a time, and at most one started every 0.25 s.
    assert 1 <= fake.models_asked - asked <= 1 + elapsed / 0.25


def test_the_routers_model_list_is_the_base_and_the_union_of_adapters(stack: ExitStack) -> None:
    one = FakeReplica(adapters={"sql": "/a/sql", "chat": "/a/chat"})
    two = FakeReplica(adapters={"sql": "/a/sql", "poems": "/a/poems"})
    urls = start(stack, one, two)
    router = serve_router(stack, urls)
    wait_for_lists(router, urls)
    listed = httpx.get(router + "/v1/models", timeout=5).json()
    assert listed["object"] == "list"
    assert [(m["id"], m["parent"]) for m in listed["data"]] == [
        ("fake", None),
        ("chat", "fake"),
        ("poems", "fake"),
        ("sql", "fake"),
    ]
    assert {m["root"] for m in listed["data"][1:]} == {"/a/chat", "/a/poems", "/a/sql"}


def test_an_unloaded_adapter_leaves_the_replicas_candidates_at_the_next_check(
    stack: ExitStack,
) -> None:
    first, second = FakeReplica(adapters={"sql": "/a/sql"}), FakeReplica(adapters={"sql": "/s"})
    urls = start(stack, first, second)
    router = serve_router(stack, urls, policy="round-robin")
    wait_for_lists(router, urls)
    del first.adapters["sql"]  # as /v1/unload_lora_adapter
    wait_for_lists(router, urls, **{urls[0]: ["fake"]})
    answers = {complete(router, "sql").headers[REPLICA_HEADER] for _ in range(4)}
    assert answers == {urls[1]}
    second.adapters.clear()
    wait_for_lists(router, urls, **{urls[1]: ["fake"]})
    assert complete(router, "sql").status_code == 404
    assert [m["id"] for m in httpx.get(router + "/v1/models").json()["data"]] == ["fake"]


def test_a_replica_refusing_an_adapter_it_still_listed_is_skipped_without_a_404(
    stack: ExitStack,
) -> None:
    first, second = FakeReplica(adapters={"sql": "/a/sql"}), FakeReplica(adapters={"sql": "/s"})
    urls = start(stack, first, second)
    router = serve_router(stack, urls, policy="round-robin", health_interval_s=60)
    wait_for_lists(router, urls)
    del first.adapters["sql"]  # unloaded between two checks: the router's list is stale
    answers = [complete(router, "sql") for _ in range(4)]
    assert {(a.status_code, a.headers[REPLICA_HEADER]) for a in answers} == {(200, urls[1])}
    assert replicas(router)[urls[0]]["served_models"] == ["fake"]
    assert replicas(router)[urls[0]]["healthy"]  # refusing a model is no failure


def test_failover_of_an_adapter_request_goes_only_to_replicas_serving_it(
    stack: ExitStack,
) -> None:
    dead = FakeReplica("dead", adapters={"sql": "/a/sql"})
    base_only, alive = FakeReplica(), FakeReplica(adapters={"sql": "/a/sql"})
    urls = start(stack, dead, base_only, alive)
    router = serve_router(stack, urls, policy="round-robin", health_interval_s=60)
    wait_for_lists(router, urls)
    answers = [complete(router, "sql") for _ in range(3)]
    assert {(a.status_code, a.headers[REPLICA_HEADER]) for a in answers} == {(200, urls[2])}
    assert dead.calls >= 1 and base_only.calls == 0


def test_a_replica_whose_model_list_fails_keeps_its_last_one(stack: ExitStack) -> None:
    fake = FakeReplica(adapters={"sql": "/a/sql"})
    urls = start(stack, fake)
    router = serve_router(stack, urls)
    wait_for_lists(router, urls)
    fake.models_refused.set()
    asked = fake.models_asked
    until(lambda: fake.models_asked >= asked + 2, lambda: fake.models_asked)
    assert replicas(router)[urls[0]]["served_models"] == ["fake", "sql"]
    assert complete(router, "sql").status_code == 200


def test_the_adapter_resident_in_a_slot_wins_over_one_to_load(stack: ExitStack) -> None:
    loaded, cold = FakeReplica(adapters={"sql": "/a/sql"}), FakeReplica(adapters={"sql": "/a"})
    loaded.resident, cold.resident = ["sql"], []
    urls = start(stack, loaded, cold)
    router = serve_router(stack, urls, policy="prefix-aware")
    wait_for_lists(router, urls)
    until(
        lambda: replicas(router)[urls[0]]["load"]["running_lora_adapters"] == ["sql"],
        lambda: replicas(router)[urls[0]]["load"],
    )
    answers = {complete(router, "sql").headers[REPLICA_HEADER] for _ in range(5)}
    assert answers == {urls[0]}


def test_an_adapter_request_with_no_ready_replica_is_held_until_one_serving_it_is(
    stack: ExitStack,
) -> None:
    fake = FakeReplica(adapters={"sql": "/a/sql"})
    fake.health_down.set()
    urls = start(stack, fake)
    router = serve_router(stack, urls, hold_timeout_s=30)
    until(lambda: not replicas(router)[urls[0]]["healthy"], lambda: replicas(router))
    pool = stack.enter_context(ThreadPoolExecutor(1))
    held = pool.submit(complete, router, "sql")
    until(lambda: demand(router)["num_held"] == 1, lambda: demand(router))
    fake.health_down.clear()
    answer = held.result(timeout=30)
    assert (answer.status_code, fake.models_seen) == (200, ["sql"])
