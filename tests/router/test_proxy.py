"""The proxy's failover and streaming, against scripted fake replicas on loopback."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.router.fake_replica import FakeReplica, ServerThread, serve_router
from tests.router.live import free_port

pytestmark = pytest.mark.timeout(60)
PROMPT = {"prompt": "hello", "max_tokens": 4}


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def test_a_failure_mid_stream_ends_the_clients_stream_with_an_error_event(stack: ExitStack) -> None:
    replica = stack.enter_context(ServerThread(FakeReplica("break").app))
    router = serve_router(stack, [replica.url])
    with httpx.stream(
        "POST", router + "/v1/completions", json={**PROMPT, "stream": True}, timeout=10
    ) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert [json.loads(e)["choices"][0]["text"] for e in events[:3]] == ["t0", "t1", "t2"]
    assert json.loads(events[3])["error"]["code"] == "replica_failed"
    assert events[4] == "[DONE]"


def test_a_client_that_disconnects_cancels_the_replicas_stream(stack: ExitStack) -> None:
    fake = FakeReplica("slow")
    replica = stack.enter_context(ServerThread(fake.app))
    router = serve_router(stack, [replica.url])
    with httpx.stream(
        "POST", router + "/v1/completions", json={**PROMPT, "stream": True}, timeout=10
    ) as response:
        next(response.iter_lines())
    assert fake.stream_cancelled.wait(timeout=5)


def test_a_503_before_the_first_byte_is_retried_on_the_next_replica(stack: ExitStack) -> None:
    down, up = FakeReplica("unavailable"), FakeReplica("ok")
    urls = [stack.enter_context(ServerThread(f.app)).url for f in (down, up)]
    router = serve_router(stack, urls, policy="round-robin")
    responses = [httpx.post(router + "/v1/completions", json=PROMPT) for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    assert up.calls == 4 and down.calls >= 1


def test_a_replica_that_refuses_connections_is_skipped_and_marked_unhealthy(
    stack: ExitStack,
) -> None:
    up = stack.enter_context(ServerThread(FakeReplica("ok").app))
    dead = f"http://127.0.0.1:{free_port()}"
    router = serve_router(stack, [dead, up.url], policy="round-robin")
    responses = [httpx.post(router + "/v1/completions", json=PROMPT) for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    view = {r["url"]: r for r in httpx.get(router + "/router/replicas").json()["replicas"]}
    assert view[dead]["healthy"] is False


def test_a_replicas_4xx_is_passed_through_and_not_retried(stack: ExitStack) -> None:
    fakes = [FakeReplica("bad"), FakeReplica("bad")]
    urls = [stack.enter_context(ServerThread(f.app)).url for f in fakes]
    router = serve_router(stack, urls)
    response = httpx.post(router + "/v1/completions", json=PROMPT)
    assert (response.status_code, response.json()["error"]["message"]) == (400, "bad")
    assert sum(f.calls for f in fakes) == 1


def test_no_healthy_replica_is_a_503_in_openais_shape(stack: ExitStack) -> None:
    router = serve_router(stack, [f"http://127.0.0.1:{free_port()}"], hold_queue_size=0)
    deadline = time.monotonic() + 5
    while (response := httpx.post(router + "/v1/completions", json=PROMPT)).status_code != 503:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert response.json()["error"]["code"] == "no_healthy_replica"


def test_the_api_key_guards_the_api_but_not_health(stack: ExitStack) -> None:
    replica = stack.enter_context(ServerThread(FakeReplica("ok").app))
    router = serve_router(stack, [replica.url], api_key="sekret")
    assert httpx.post(router + "/v1/completions", json=PROMPT).status_code == 401
    ok = httpx.post(
        router + "/v1/completions", json=PROMPT, headers={"Authorization": "Bearer sekret"}
    )
    assert ok.status_code == 200
    assert httpx.get(router + "/health").status_code == 200


def test_the_clients_authorization_and_content_type_reach_the_replica_unchanged(
    stack: ExitStack,
) -> None:
    fake = FakeReplica("ok")
    router = serve_router(stack, [stack.enter_context(ServerThread(fake.app)).url])
    headers = {"Authorization": "Bearer client-key", "Content-Type": "application/json"}
    assert httpx.post(router + "/v1/completions", json=PROMPT, headers=headers).status_code == 200
    assert (fake.last_headers["authorization"], fake.last_headers["content-type"]) == (
        "Bearer client-key",
        "application/json",
    )
    assert httpx.post(router + "/v1/completions", content=json.dumps(PROMPT)).status_code == 200
    assert "content-type" not in fake.last_headers  # none sent, none added


def test_the_replica_api_key_replaces_the_clients_authorization(stack: ExitStack) -> None:
    fake = FakeReplica("ok")
    router = serve_router(
        stack,
        [stack.enter_context(ServerThread(fake.app)).url],
        api_key="client-key",
        replica_api_key="replica-key",
    )
    response = httpx.post(
        router + "/v1/completions", json=PROMPT, headers={"Authorization": "Bearer client-key"}
    )
    assert response.status_code == 200
    assert fake.last_headers["authorization"] == "Bearer replica-key"


def replica_view(router: str) -> dict[str, dict[str, object]]:
    return {r["url"]: r for r in httpx.get(router + "/router/replicas").json()["replicas"]}


def test_a_poison_requests_500_reaches_the_client_and_the_replica_stays_healthy(
    stack: ExitStack,
) -> None:
    fakes = [FakeReplica("poison"), FakeReplica("poison")]
    urls = [stack.enter_context(ServerThread(f.app)).url for f in fakes]
    router = serve_router(stack, urls, policy="round-robin")
    response = httpx.post(router + "/v1/completions", json=PROMPT)
    assert (response.status_code, response.json()["error"]["code"]) == (500, "engine_error")
    assert sum(f.calls for f in fakes) == 1  # not retried: it would fail on every replica
    assert all(r["healthy"] for r in replica_view(router).values())


def test_a_503_engine_dead_fails_over_and_marks_the_replica_unhealthy(stack: ExitStack) -> None:
    dead, up = FakeReplica("dead"), FakeReplica("ok")
    urls = [stack.enter_context(ServerThread(f.app)).url for f in (dead, up)]
    router = serve_router(stack, urls, policy="round-robin", health_interval_s=60)
    time.sleep(0.5)  # the first health checks (which the dead engine's /health passes) are done
    responses = [httpx.post(router + "/v1/completions", json=PROMPT) for _ in range(2)]
    assert [r.status_code for r in responses] == [200, 200] and dead.calls == 1
    assert replica_view(router)[urls[0]]["healthy"] is False


def test_infinite_or_nan_load_metrics_leave_routing_working_with_one_warning(
    stack: ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    replica = stack.enter_context(ServerThread(FakeReplica("inf_load").app))
    with caplog.at_level(logging.WARNING, logger="pagedock.router"):
        router = serve_router(stack, [replica.url])
        time.sleep(1.0)  # about five scrapes
        assert httpx.post(router + "/v1/completions", json=PROMPT).status_code == 200
        assert replica_view(router)[replica.url]["load"]["num_requests_running"] == 0
    assert sum("unusable load metrics" in r.getMessage() for r in caplog.records) == 1


def test_a_kv_event_stream_refused_with_401_is_warned_once_and_shown(
    stack: ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    replica = stack.enter_context(ServerThread(FakeReplica("locked").app))
    with caplog.at_level(logging.WARNING, logger="pagedock.router"):
        router = serve_router(stack, [replica.url], event_backoff_max_s=0.1)
        time.sleep(1.0)  # several resubscriptions
        assert "401" in str(replica_view(router)[replica.url]["kv_error"])
    assert sum("refused with HTTP 401" in r.getMessage() for r in caplog.records) == 1
