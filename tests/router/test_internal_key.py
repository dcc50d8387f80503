"""The engines' internal key, as the router holds it: sent on its own continuations and KV event
subscriptions, never on a client's request; and a client's `continuation` is refused, never passed
through (pagedock/http/internal_key.py)."""

from __future__ import annotations

import asyncio
import json
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from pagedock.http.internal_key import INTERNAL_KEY_HEADER
from router.http.stream_resume import StreamTranscript
from router.http.upstream import AttemptFailed
from router.kv.event_subscriber import EventSubscriber
from router.kv.kv_index import KVIndex
from router.metrics import RouterMetrics
from router.replicas.replica import Replica
from tests.router.factories import make_config
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router
from tests.router.test_resume_same_weights import REVISION_1, failover, replica

pytestmark = pytest.mark.timeout(60)
KEY = "fleet-internal-key"


def test_a_continuation_carries_the_internal_key() -> None:
    sent: list[tuple[dict[str, str], bytes]] = []

    async def recording_exchange(
        _request: object, headers: dict[str, str], body: bytes, *_: object
    ) -> Any:
        sent.append((headers, body))
        raise AttemptFailed("refused", mark_unhealthy=False)

    f, resumable = failover(replica("a", REVISION_1), replica("b", REVISION_1))
    f.dispatcher.config.internal_api_key = KEY
    f._exchange = recording_exchange
    transcript = StreamTranscript(resumable.plan, token_ids=[7, 8, 9])
    assert asyncio.run(f._resume(resumable, transcript, ["a"], REVISION_1)) is None
    [(headers, body)] = sent
    assert headers[INTERNAL_KEY_HEADER] == KEY
    assert json.loads(body)["continuation"] == {"token_ids": [7, 8, 9]}


def test_a_kv_event_subscription_carries_the_internal_key() -> None:
    seen: list[httpx.Headers] = []

    def replica_answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(401, json={"error": {"message": "key"}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(replica_answer))
    config = make_config(internal_api_key=KEY)
    subscriber = EventSubscriber(
        Replica("http://replica"), KVIndex(), client, config, RouterMetrics(config.policy)
    )
    with pytest.raises(httpx.HTTPStatusError):
        asyncio.run(subscriber._consume())
    assert seen[0][INTERNAL_KEY_HEADER] == KEY


def test_a_clients_continuation_is_refused_not_passed_through() -> None:
    fake = FakeReplica()
    with ExitStack() as stack:
        router = serve_router(stack, [_url(stack, fake)], internal_api_key=KEY)
        body = {"prompt": "hi", "stream": True, "continuation": {"token_ids": [1, 2]}}
        response = httpx.post(f"{router}/v1/completions", json=body, timeout=10)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("continuation", "continuation_not_allowed")
    assert fake.calls == 0


def test_a_clients_internal_key_header_never_reaches_a_replica() -> None:
    fake = FakeReplica()
    with ExitStack() as stack:
        router = serve_router(stack, [_url(stack, fake)], internal_api_key=KEY)
        headers = {INTERNAL_KEY_HEADER: "a guess"}
        response = httpx.post(
            f"{router}/v1/completions", json={"prompt": "hi"}, headers=headers, timeout=10
        )
    assert response.status_code == 200, response.text
    assert fake.calls == 1 and INTERNAL_KEY_HEADER not in fake.last_headers


def _url(stack: ExitStack, fake: FakeReplica) -> str:
    return stack.enter_context(ServerThread(fake.app)).url
