"""Scale from zero, router side: with no ready replica the router stays healthy and holds requests
in a bounded queue, releases them in arrival order to the first replica that turns ready, and
refuses with a quick 503 + Retry-After beyond the queue's size or timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack

import httpx
import pytest

from router.http.proxy import DISPATCH_HEADER
from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.test_proxy import PROMPT, serve_router

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def wait_until(check: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def down_replica(stack: ExitStack, mode: str = "ok") -> tuple[FakeReplica, str]:
    """A replica whose health checks fail, and a router that has seen it fail."""
    fake = FakeReplica(mode)
    fake.health_down.set()
    replica = stack.enter_context(ServerThread(fake.app))
    return fake, replica.url


def demand(router: str) -> dict:
    return httpx.get(router + "/router/demand").json()  # type: ignore[no-any-return]


def unhealthy(router: str) -> bool:
    return not any(r["healthy"] for r in demand(router)["replicas"])


def test_the_router_is_healthy_with_no_ready_replica(stack: ExitStack) -> None:
    _, url = down_replica(stack)
    router = serve_router(stack, [url])
    wait_until(lambda: unhealthy(router))
    response = httpx.get(router + "/health")
    assert (response.status_code, response.json()["healthy_replicas"]) == (200, 0)


def test_held_requests_are_dispatched_in_arrival_order_once_a_replica_is_ready(
    stack: ExitStack,
) -> None:
    fake, url = down_replica(stack, "stream")
    router = serve_router(stack, [url], hold_timeout_s=30)
    wait_until(lambda: unhealthy(router))
    pool = stack.enter_context(ThreadPoolExecutor(6))
    sent: list[Future[httpx.Response]] = []
    for i in range(6):
        body = {**PROMPT, "stream": i % 2 == 0}
        sent.append(pool.submit(httpx.post, router + "/v1/completions", json=body, timeout=30))
        wait_until(lambda n=i + 1: demand(router)["num_held"] == n)  # arrival order is known
    assert fake.calls == 0
    fake.health_down.clear()
    responses = [f.result() for f in sent]
    assert [r.status_code for r in responses] == [200] * 6
    seqs = [int(r.headers[DISPATCH_HEADER]) for r in responses]
    assert seqs == sorted(seqs)
    assert all("t2" in r.text and "[DONE]" in r.text for r in responses)
    assert demand(router)["num_held"] == 0


def test_a_request_beyond_the_queue_size_gets_a_503_with_retry_after_at_once(
    stack: ExitStack,
) -> None:
    _, url = down_replica(stack)
    router = serve_router(stack, [url], hold_queue_size=2, hold_timeout_s=30)
    wait_until(lambda: unhealthy(router))
    pool = stack.enter_context(ThreadPoolExecutor(2))
    for n in (1, 2):
        pool.submit(httpx.post, router + "/v1/completions", json=PROMPT, timeout=30)
        wait_until(lambda n=n: demand(router)["num_held"] == n)
    started = time.monotonic()
    response = httpx.post(router + "/v1/completions", json=PROMPT, timeout=30)
    assert time.monotonic() - started < 5
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "hold_queue_full"
    assert int(response.headers["retry-after"]) >= 1


def test_a_held_request_gets_a_503_with_retry_after_after_the_hold_timeout(
    stack: ExitStack,
) -> None:
    _, url = down_replica(stack)
    router = serve_router(stack, [url], hold_timeout_s=0.5)
    wait_until(lambda: unhealthy(router))
    response = httpx.post(router + "/v1/completions", json=PROMPT, timeout=30)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_ready_replica"
    assert "retry-after" in response.headers
    assert demand(router)["num_held"] == 0


def test_demand_counts_requests_and_idle_time(stack: ExitStack) -> None:
    replica = stack.enter_context(ServerThread(FakeReplica("ok").app))
    router = serve_router(stack, [replica.url])
    assert httpx.post(router + "/v1/completions", json=PROMPT).status_code == 200
    view = demand(router)
    assert view["num_requests"] == 1 and view["num_held"] == 0
    assert view["idle_seconds"] >= 0
    assert [r["url"] for r in view["replicas"]] == [replica.url]
