"""The router's request ids and trace context (pagedock/http/request_context.py): a request's
`x-request-id` (the client's, or one the router makes) and its W3C `traceparent` reach the
replica, and the client hears the id back, so the router's and the engine's log lines about one
request share it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.router.fake_replica import FakeReplica, ServerThread, serve_router

pytestmark = pytest.mark.timeout(60)
PROMPT = {"prompt": "hello", "max_tokens": 4}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture()
def routed() -> Iterator[tuple[FakeReplica, str]]:
    with ExitStack() as stack:
        fake = FakeReplica("ok")
        replica = stack.enter_context(ServerThread(fake.app))
        yield fake, serve_router(stack, [replica.url])


def test_the_clients_request_id_and_traceparent_reach_the_replica(
    routed: tuple[FakeReplica, str],
) -> None:
    fake, router = routed
    headers = {"x-request-id": "client-7", "traceparent": TRACEPARENT, "tracestate": "k=v"}
    response = httpx.post(router + "/v1/completions", json=PROMPT, headers=headers)
    assert response.status_code == 200 and response.headers["x-request-id"] == "client-7"
    assert fake.last_headers["x-request-id"] == "client-7"
    assert fake.last_headers["traceparent"] == TRACEPARENT
    assert fake.last_headers["tracestate"] == "k=v"


def test_a_request_without_an_id_gets_one_the_replica_and_the_client_both_see(
    routed: tuple[FakeReplica, str],
) -> None:
    fake, router = routed
    response = httpx.post(router + "/v1/completions", json=PROMPT)
    made = response.headers["x-request-id"]
    assert len(made) == 32 and fake.last_headers["x-request-id"] == made
    assert response.headers.get_list("x-request-id") == [made]  # one, not the replica's too
