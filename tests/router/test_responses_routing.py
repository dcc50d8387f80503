"""The Responses API through the router, against stand-in replicas (tests/router/fake_replica.py):
a follow-up goes to the replica that produced the response it continues (learnt from the JSON
answer or, without holding the stream back, from its first event), elsewhere when that replica is
down; reads and deletes of a stored response go where it was made, traced as a generation is; the
map is per tenant."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pagedock.tenancy.tenants import TENANT_HEADER
from pagedock.tracing.tracer import start_tracing
from router.http.proxy import REPLICA_HEADER
from tests.eventually import eventually_sync
from tests.otlp_receiver import OtlpReceiver
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router
from tests.router.live import wait_until

pytestmark = pytest.mark.timeout(60)
TURN = {"model": "fake", "input": "hello"}


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def fleet(
    stack: ExitStack, size: int = 2, key: str | None = None, **overrides: Any
) -> tuple[dict[str, FakeReplica], str]:
    """`size` stand-ins by URL, behind a round-robin router: without the conversation's pull,
    consecutive requests alternate between replicas. `key`: a key the router lets in."""
    fakes = [FakeReplica() for _ in range(size)]
    urls = [stack.enter_context(ServerThread(f.app)).url for f in fakes]
    router = serve_router(stack, urls, policy="round-robin", **overrides)
    wait_until(lambda: healthy(router, key) == set(urls))
    return dict(zip(urls, fakes, strict=True)), router


def healthy(router: str, key: str | None = None) -> set[str]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    view = httpx.get(router + "/router/replicas", headers=headers, timeout=5)
    return {r["url"] for r in view.json()["replicas"] if r["healthy"]}


def create(router: str, previous: str | None = None, **headers: str) -> httpx.Response:
    body = {**TURN, "previous_response_id": previous} if previous else TURN
    return httpx.post(router + "/v1/responses", json=body, headers=headers, timeout=10)


def conversation_decisions(router: str) -> float:
    text = httpx.get(router + "/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "pagedock_router_requests_total"
        and sample.labels.get("reason") == "conversation"
    )


def test_every_follow_up_lands_on_the_replica_that_produced_its_previous_response(
    stack: ExitStack,
) -> None:
    fakes, router = fleet(stack)
    first = create(router)
    assert first.status_code == 200, first.text
    producer, previous = first.headers[REPLICA_HEADER], first.json()["id"]
    for _ in range(4):
        turn = create(router, previous)
        assert turn.status_code == 200, turn.text
        assert turn.headers[REPLICA_HEADER] == producer
        previous = turn.json()["id"]
    assert fakes[producer].response_calls == 5
    assert conversation_decisions(router) == 4
    # A first turn still goes by the policy: round-robin moves it on.
    assert create(router).headers[REPLICA_HEADER] != producer


def test_a_streamed_answers_id_is_learnt_from_its_first_event_while_it_streams(
    stack: ExitStack,
) -> None:
    fakes, router = fleet(stack)
    for fake in fakes.values():
        fake.stream_gate = threading.Event()  # each holds its stream after the first event
    body = {**TURN, "stream": True}
    with httpx.stream("POST", router + "/v1/responses", json=body, timeout=10) as stream:
        producer = stream.headers[REPLICA_HEADER]
        lines = stream.iter_lines()
        assert next(lines) == "event: response.created"
        created = json.loads(next(lines).removeprefix("data: "))
        # The replica holds the rest of its stream: the router passed the first event on at once.
        follow_up = create(router, created["response"]["id"])
        assert (follow_up.status_code, follow_up.headers[REPLICA_HEADER]) == (200, producer)
        gate = fakes[producer].stream_gate
        assert gate is not None
        gate.set()
        rest = [line for line in lines if line.startswith("event: ")]
    assert rest == ["event: response.output_text.delta", "event: response.completed"]


def test_a_follow_up_whose_replica_is_down_goes_to_another(stack: ExitStack) -> None:
    fakes, router = fleet(stack)
    a, b = fakes.values()
    b.stored = a.stored  # one store for both, as Redis is
    first = create(router)
    producer = first.headers[REPLICA_HEADER]
    fakes[producer].health_down.set()
    wait_until(lambda: producer not in healthy(router))
    turn = create(router, first.json()["id"])
    assert turn.status_code == 200, turn.text
    assert turn.headers[REPLICA_HEADER] != producer


def test_a_follow_up_elsewhere_with_per_replica_stores_gets_the_engines_400(
    stack: ExitStack,
) -> None:
    fakes, router = fleet(stack)
    first = create(router)
    producer = first.headers[REPLICA_HEADER]
    fakes[producer].health_down.set()
    wait_until(lambda: producer not in healthy(router))
    turn = create(router, first.json()["id"])
    assert turn.status_code == 400
    assert turn.json()["error"]["code"] == "previous_response_not_found"


def test_reads_and_deletes_go_to_the_replica_that_produced_the_response(
    stack: ExitStack,
) -> None:
    fakes, router = fleet(stack)
    first = create(router)
    producer, response_id = first.headers[REPLICA_HEADER], first.json()["id"]
    url = f"{router}/v1/responses/{response_id}"
    for _ in range(3):  # round-robin would alternate: each lands on the producer
        got = httpx.get(url, timeout=10)
        assert (got.status_code, got.headers[REPLICA_HEADER]) == (200, producer), got.text
        assert got.json()["id"] == response_id
    items = httpx.get(url + "/input_items", params={"order": "asc", "limit": 2}, timeout=10)
    assert (items.status_code, items.headers[REPLICA_HEADER]) == (200, producer)
    assert fakes[producer].last_query == "order=asc&limit=2"
    deleted = httpx.delete(url, timeout=10)
    assert (deleted.status_code, deleted.json()["deleted"]) == (200, True)
    assert deleted.headers[REPLICA_HEADER] == producer
    assert response_id not in fakes[producer].stored


def test_reads_and_deletes_are_traced_with_their_routing(
    stack: ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export within 50 ms, not 5 s
    receiver = stack.enter_context(OtlpReceiver())
    tracing = start_tracing("pagedock-router", receiver.url)
    assert tracing is not None
    stack.callback(tracing.shutdown)
    _, router = fleet(stack, tracing=tracing)
    first = create(router)
    producer, response_id = first.headers[REPLICA_HEADER], first.json()["id"]
    for number, method in enumerate(("GET", "DELETE"), start=1):
        trace_id = f"{number:032x}"
        headers = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
        url = f"{router}/v1/responses/{response_id}"
        assert httpx.request(method, url, headers=headers, timeout=10).status_code == 200

        def names(trace_id: str = trace_id) -> set[str]:
            return {s.name for s in receiver.trace(trace_id)}

        eventually_sync(lambda: {"router_request", "route", "upstream"} <= names(), 30, "spans")
        found = {s.name: s for s in receiver.trace(trace_id)}
        assert found["router_request"].attributes["http.request.method"] == method
        route = found["route"].attributes
        assert (route["pagedock.route.reason"], route["pagedock.route.replica"]) == (
            "conversation",
            producer,
        )
        assert found["upstream"].parent_span_id == found["router_request"].span_id


def test_an_unknown_id_is_read_from_a_ready_replica_whose_404_passes_through(
    stack: ExitStack,
) -> None:
    _, router = fleet(stack)
    for method in ("GET", "DELETE"):
        response = httpx.request(method, router + "/v1/responses/resp_unknown", timeout=10)
        assert response.status_code == 404
        assert response.json()["error"]["param"] == "response_id"


def test_another_tenants_follow_up_is_routed_by_the_policy_and_named_to_the_engine(
    stack: ExitStack, tmp_path: Path
) -> None:
    tenants = {"tenants": [{"name": n, "api_keys": [f"sk-{n}"]} for n in ("alpha", "beta")]}
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps(tenants))
    fakes, router = fleet(stack, key="sk-alpha", tenants=str(path))
    first = create(router, authorization="Bearer sk-alpha")
    producer, response_id = first.headers[REPLICA_HEADER], first.json()["id"]
    assert fakes[producer].last_headers[TENANT_HEADER] == "alpha"
    # Two turns of beta's: round-robin sends them to both replicas, the map to neither.
    seen = {
        create(router, response_id, authorization="Bearer sk-beta").headers[REPLICA_HEADER]
        for _ in range(2)
    }
    assert len(seen) == 2
    read = httpx.get(
        f"{router}/v1/responses/{response_id}",
        headers={"authorization": "Bearer sk-alpha"},
        timeout=10,
    )
    assert (read.status_code, read.headers[REPLICA_HEADER]) == (200, producer)
    assert fakes[producer].last_headers[TENANT_HEADER] == "alpha"  # the engine reads as alpha


def test_the_api_key_guards_every_responses_route(stack: ExitStack) -> None:
    _, router = fleet(stack, size=1, key="sekret", api_key="sekret")
    for method, path in (
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/resp_1"),
        ("DELETE", "/v1/responses/resp_1"),
        ("GET", "/v1/responses/resp_1/input_items"),
    ):
        body = TURN if method == "POST" else None
        response = httpx.request(method, router + path, json=body, timeout=10)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "invalid_api_key"
    ok = create(router, authorization="Bearer sekret")
    assert ok.status_code == 200


def test_a_client_that_leaves_a_response_stream_cancels_the_replicas(stack: ExitStack) -> None:
    fakes, router = fleet(stack, size=1)
    [fake] = fakes.values()
    fake.stream_gate = threading.Event()  # never set: the stream waits
    body = {**TURN, "stream": True}
    with httpx.stream("POST", router + "/v1/responses", json=body, timeout=10) as stream:
        assert next(stream.iter_lines()) == "event: response.created"
    assert fake.stream_cancelled.wait(timeout=10)


def test_a_responses_output_tokens_are_charged_to_its_tenant(
    stack: ExitStack, tmp_path: Path
) -> None:
    tenants = {"tenants": [{"name": "metered", "api_keys": ["sk-metered"]}]}
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps(tenants))
    fakes, router = fleet(stack, size=1, key="sk-metered", tenants=str(path))
    [fake] = fakes.values()
    fake.completion_tokens = 7
    # Long instructions, echoed after `usage`: the count is found however far from the end.
    body = {**TURN, "instructions": "Be brief. " * 2000}
    headers = {"authorization": "Bearer sk-metered"}
    assert httpx.post(router + "/v1/responses", json=body, headers=headers).status_code == 200
    stream = {**body, "stream": True}
    with httpx.stream("POST", router + "/v1/responses", json=stream, headers=headers) as response:
        assert response.status_code == 200
        response.read()
    wait_until(lambda: completion_tokens(router, "sk-metered", "metered") == 14)


def completion_tokens(router: str, key: str, tenant: str) -> float:
    headers = {"authorization": f"Bearer {key}"}
    text = httpx.get(router + "/metrics", headers=headers, timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "pagedock_router_tenant_tokens_total"
        and sample.labels == {"tenant": tenant, "kind": "completion"}
    )
