"""The router's request bodies are bounded in bytes: a body past --max-buffered-body-bytes, or a
held one past --hold-queue-bytes, gets a 503 at once, while the requests under the budget are
served; a held request is its raw body (parsed once released); and the bytes come back however a
request ends."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from pagedock.errors import ConfigError
from pagedock.limits import MAX_BODY_BYTES, MIN_BODY_BUDGET_BYTES, SMALL_BODY_BYTES
from router.config import RouterConfig
from router.http.body_budget import BodyBudget
from router.http.hold_queue import HoldQueue, HoldRefused
from router.kv.prompt_hasher import PromptHasher
from router.picker.endpoint_picker import EndpointPicker
from router.replicas.discovery.static import StaticDiscovery
from router.replicas.replica import Replica
from router.server.app import build_app
from router.server.context import RouterContext
from tests.eventually import eventually
from tests.router.factories import make_config
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router
from tests.router.test_endpoint_picker import (
    body_frames,
    completion,
    destination_header,
    immediate_status,
)
from tests.router.test_endpoint_picker import headers as picker_headers

pytestmark = pytest.mark.timeout(120)
MIB = 1 << 20
BIG = 3 * MIB + MIB // 2  # two are held under an 8 MiB budget, a third is not


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def body_of(num_bytes: int, **fields: Any) -> bytes:
    """A completions body of about `num_bytes`."""
    return json.dumps({"prompt": "w" * num_bytes, "max_tokens": 2, **fields}).encode()


def post(router: str, body: bytes, timeout: float = 60) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(router + "/v1/completions", content=body, headers=headers, timeout=timeout)


def health(router: str) -> dict[str, Any]:
    return httpx.get(router + "/health", timeout=30).json()


def wait_until(check: Callable[[], Any], what: Callable[[], object], timeout_s: float = 30) -> None:
    """Poll until `check()` holds; fail with what `what()` shows then."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what()}"
        time.sleep(0.05)


def wait_for_health(router: str, **expected: int) -> None:
    """Until /health shows every `expected` field's value."""
    wait_until(lambda: expected.items() <= health(router).items(), lambda: health(router))


def down_replica(stack: ExitStack, mode: str = "ok") -> tuple[FakeReplica, str]:
    """A replica whose health checks fail (requests are held), served until `stack` closes."""
    fake = FakeReplica(mode)
    fake.health_down.set()
    return fake, stack.enter_context(ServerThread(fake.app)).url


def held_router(stack: ExitStack, replica: str, **overrides: Any) -> str:
    """A router that has seen `replica` fail its health checks."""
    overrides = {"hold_timeout_s": 60, **overrides}
    router = serve_router(stack, [replica], **overrides)

    def replicas() -> list[dict[str, Any]]:
        return httpx.get(router + "/router/replicas").json()["replicas"]

    wait_until(lambda: not any(r["healthy"] for r in replicas()), replicas)
    return router


def hold(
    pool: ThreadPoolExecutor, router: str, bodies: list[bytes]
) -> list[Future[httpx.Response]]:
    """Send `bodies` one after another, each once the one before is held."""
    sent = []
    for n, body in enumerate(bodies, 1):
        sent.append(pool.submit(post, router, body))
        wait_for_health(router, held_requests=n)
    return sent


# ---- the budget and the hold queue's byte cap, unit by unit -------------------------------------


def test_a_lease_takes_the_budget_as_its_body_grows_and_gives_it_all_back() -> None:
    budget = BodyBudget(100)
    first, second = budget.lease(), budget.lease()
    assert first.grow_to(60) and first.grow_to(30) and budget.used_bytes == 60
    assert not second.grow_to(41)  # past the budget: nothing taken
    assert budget.used_bytes == 60 and second.num_bytes == 0
    assert second.grow_to(40) and budget.used_bytes == 100
    first.release()
    second.release()
    assert budget.used_bytes == 0


def test_the_hold_queue_refuses_a_body_past_its_bytes_and_frees_them_when_waiters_go() -> None:
    async def scenario() -> None:
        queue = HoldQueue(max_size=10, timeout_s=30, is_ready=lambda: False, max_bytes=100)
        waiting = asyncio.ensure_future(queue.wait_for_replica(70))
        await eventually(lambda: len(queue) == 1, what="the first waiter in line")
        assert queue.held_bytes == 70
        with pytest.raises(HoldRefused) as refused:
            await queue.wait_for_replica(31)
        assert refused.value.code == "hold_queue_full" and "--hold-queue-bytes" in str(
            refused.value
        )
        small = asyncio.ensure_future(queue.wait_for_replica(30))
        await eventually(lambda: len(queue) == 2, what="the small waiter in line")
        assert queue.held_bytes == 100
        waiting.cancel()  # its client left
        queue.is_ready = lambda: True
        queue.release()
        await asyncio.gather(small, waiting, return_exceptions=True)
        assert (len(queue), queue.held_bytes) == (0, 0)

    asyncio.run(scenario())


def test_the_budget_must_fit_the_largest_body() -> None:
    with pytest.raises(ConfigError, match="max_buffered_body_bytes"):
        make_config(max_buffered_body_bytes=MAX_BODY_BYTES - 1)
    with pytest.raises(ConfigError, match="hold_queue_bytes"):
        make_config(hold_queue_bytes=-1)


# ---- over HTTP ----------------------------------------------------------------------------------


def test_a_body_past_the_budget_is_refused_at_once_and_a_small_one_is_still_served(
    stack: ExitStack,
) -> None:
    fake, url = down_replica(stack)
    router = held_router(stack, url, max_buffered_body_bytes=MIN_BODY_BUDGET_BYTES)
    pool = stack.enter_context(ThreadPoolExecutor(3))
    big = body_of(BIG)
    held = hold(pool, router, [big, big])
    started = time.monotonic()
    refused = post(router, big)
    assert time.monotonic() - started < 10  # at once, not after the hold timeout
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("service_unavailable_error", "router_memory_full")
    assert "--max-buffered-body-bytes" in error["message"]
    assert int(refused.headers["retry-after"]) >= 1
    small = pool.submit(post, router, body_of(1000))
    wait_for_health(router, held_requests=3)
    fake.health_down.clear()
    assert [f.result().status_code for f in [*held, small]] == [200, 200, 200]
    assert fake.calls == 3
    wait_for_health(router, buffered_body_bytes=0, held_body_bytes=0, held_requests=0)


def test_a_chunked_body_past_the_budget_is_refused_as_it_streams_in(stack: ExitStack) -> None:
    _, url = down_replica(stack)
    router = held_router(stack, url, max_buffered_body_bytes=MIN_BODY_BUDGET_BYTES)
    pool = stack.enter_context(ThreadPoolExecutor(2))
    hold(pool, router, [body_of(BIG), body_of(BIG)])
    chunk = b"w" * MIB

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it is read
        yield b'{"max_tokens": 2, "prompt": "'
        for _ in range(BIG // MIB + 1):
            yield chunk
        yield b'"}'

    response = httpx.post(router + "/v1/completions", content=chunked(), timeout=60)
    assert (response.status_code, response.json()["error"]["code"]) == (503, "router_memory_full")
    wait_for_health(router, buffered_body_bytes=2 * len(body_of(BIG)))


def test_a_held_body_past_the_hold_queues_bytes_gets_hold_queue_full(stack: ExitStack) -> None:
    fake, url = down_replica(stack)
    router = held_router(stack, url, hold_queue_bytes=4 * MIB)
    pool = stack.enter_context(ThreadPoolExecutor(2))
    [held] = hold(pool, router, [body_of(BIG)])
    refused = post(router, body_of(BIG))
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "hold_queue_full"
    assert "retry-after" in refused.headers
    small = pool.submit(post, router, body_of(1000))
    wait_for_health(router, held_requests=2)
    fake.health_down.clear()
    assert (held.result().status_code, small.result().status_code) == (200, 200)
    wait_for_health(router, buffered_body_bytes=0, held_body_bytes=0)


def test_a_held_request_is_parsed_only_once_it_is_released(stack: ExitStack) -> None:
    fake, url = down_replica(stack)
    config = RouterConfig(replicas=[url], model=None, health_interval_s=0.2, hold_timeout_s=60)
    ctx = RouterContext(config, PromptHasher(None), StaticDiscovery(config.replicas))
    parsed: list[int] = []
    parse = ctx.parser.parse_and_hash

    async def counted(body: bytes, *args: Any) -> Any:
        parsed.append(len(body))
        return await parse(body, *args)

    ctx.parser.parse_and_hash = counted  # type: ignore[method-assign,assignment]
    router = stack.enter_context(ServerThread(build_app(ctx))).url
    body = body_of(MIB)
    pool = stack.enter_context(ThreadPoolExecutor(1))
    [held] = hold(pool, router, [body])
    assert health(router)["held_body_bytes"] == len(body) and parsed == []
    fake.health_down.clear()
    assert held.result().status_code == 200
    assert parsed == [len(body)]


def test_a_request_in_flight_counts_its_body_until_it_ends(stack: ExitStack) -> None:
    fake = FakeReplica("hang")
    router = serve_router(stack, [stack.enter_context(ServerThread(fake.app)).url])
    body = body_of(MIB)
    pool = stack.enter_context(ThreadPoolExecutor(1))
    answer = pool.submit(post, router, body)
    wait_until(lambda: fake.calls == 1, lambda: health(router))
    assert health(router)["buffered_body_bytes"] == len(body)
    fake.mode = "ok"
    assert answer.result().status_code == 200
    wait_for_health(router, buffered_body_bytes=0)


@pytest.mark.parametrize("mode", ["ok", "stream", "bad", "poison", "dead"])
def test_the_bytes_come_back_after_an_answer_or_a_replicas_failure(
    stack: ExitStack, mode: str
) -> None:
    fake = FakeReplica(mode)
    router = serve_router(stack, [stack.enter_context(ServerThread(fake.app)).url])
    response = post(router, body_of(MIB, stream=mode == "stream"))
    assert response.status_code in (200, 400, 500, 503) and fake.calls >= 1
    wait_for_health(router, buffered_body_bytes=0)


def test_the_bytes_come_back_when_a_held_request_times_out(stack: ExitStack) -> None:
    _, url = down_replica(stack)
    router = held_router(stack, url, hold_timeout_s=0.5)
    response = post(router, body_of(MIB))
    assert (response.status_code, response.json()["error"]["code"]) == (503, "no_ready_replica")
    wait_for_health(router, buffered_body_bytes=0, held_body_bytes=0, held_requests=0)


def test_the_bytes_come_back_when_a_held_client_leaves(stack: ExitStack) -> None:
    _, url = down_replica(stack)
    router = held_router(stack, url)
    body = body_of(MIB)
    port = int(router.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        head = (
            "POST /v1/completions HTTP/1.1\r\nhost: router\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        client.sendall(head.encode() + body)
        wait_for_health(router, held_requests=1, held_body_bytes=len(body))
    wait_for_health(router, buffered_body_bytes=0, held_body_bytes=0, held_requests=0)


def test_the_bytes_come_back_when_a_streaming_client_leaves(stack: ExitStack) -> None:
    fake = FakeReplica("slow")
    router = serve_router(stack, [stack.enter_context(ServerThread(fake.app)).url])
    body = body_of(MIB, stream=True)
    headers = {"content-type": "application/json"}
    with httpx.stream(
        "POST", router + "/v1/completions", content=body, headers=headers, timeout=30
    ) as response:
        lines = response.iter_lines()  # kept: a dropped iterator closes the connection
        assert next(lines).startswith("data: ")
        assert health(router)["buffered_body_bytes"] == len(body)
    assert fake.stream_cancelled.wait(timeout=30)
    wait_for_health(router, buffered_body_bytes=0)


# ---- the endpoint picker's bodies ---------------------------------------------------------------


def test_the_picker_refuses_a_body_past_the_budget_and_gives_back_what_it_took() -> None:
    url = "http://10.0.0.1:8000"
    ctx = RouterContext(make_config(replicas=[url]), PromptHasher(None), StaticDiscovery([url]))
    ctx.replica_set.replicas[url] = Replica(url, root_hash=b"\x01" * 32, kv_synced=True)
    picker = EndpointPicker(ctx)

    def exchange(body: bytes) -> list[Any]:
        async def frames() -> AsyncIterator[Any]:
            for frame in [picker_headers(), *body_frames(body)]:
                yield frame

        async def run() -> list[Any]:
            return [r async for r in picker.Process(frames(), None)]

        return asyncio.run(run())

    budget = ctx.body_budget
    budget.used_bytes = budget.max_bytes - 200  # other requests' bodies under way
    status, error, response_headers = immediate_status(exchange(completion("y" * 300)))
    assert (status, error["error"]["code"]) == (503, "router_memory_full")
    assert "retry-after" in response_headers
    assert destination_header(exchange(completion("y"))[0]) == "10.0.0.1:8000"
    assert budget.used_bytes == budget.max_bytes - 200


def test_large_bodies_leave_a_sixteenth_of_the_budget_to_small_ones() -> None:
    # Issue 34: eight 8 MiB bodies filled a 64 MiB budget, and every ordinary request got a 503.
    budget = BodyBudget(64 * MIB)
    big = [budget.lease() for _ in range(8)]
    taken = [lease.grow_to(8 * MIB) for lease in big]
    assert taken == [True] * 7 + [False] and budget.used_bytes == 56 * MIB
    small = [budget.lease() for _ in range(8 * MIB // SMALL_BODY_BYTES)]
    assert all(lease.grow_to(SMALL_BODY_BYTES) for lease in small)
    assert budget.used_bytes == 64 * MIB
    assert not budget.lease().grow_to(1)  # the reserve used up: nobody gets more


def test_the_smallest_budget_takes_the_largest_body() -> None:
    budget = BodyBudget(MIN_BODY_BUDGET_BYTES)
    assert budget.lease().grow_to(MAX_BODY_BYTES)
    make_config(max_buffered_body_bytes=MIN_BODY_BUDGET_BYTES)
    with pytest.raises(ConfigError, match=f"at least {MIN_BODY_BUDGET_BYTES}"):
        make_config(max_buffered_body_bytes=MIN_BODY_BUDGET_BYTES - 1)
    assert not BodyBudget(MIN_BODY_BUDGET_BYTES - 1).lease().grow_to(MAX_BODY_BYTES)
