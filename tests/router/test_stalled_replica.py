"""A replica that stops answering (SIGSTOP-like) loses its in-flight requests within
--stall-eject-s of leaving the healthy set: retried elsewhere before their first byte, ended with an
error event mid-stream; a replica that fails a check but keeps sending bytes keeps its stream."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.test_proxy import serve_router

pytestmark = pytest.mark.timeout(60)
FAST = {"health_interval_s": 0.2, "health_timeout_s": 0.3, "stall_eject_s": 0.5}
PROMPT = {"prompt": "hello", "max_tokens": 4}


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def serve(stack: ExitStack, *fakes: FakeReplica) -> str:
    urls = [stack.enter_context(ServerThread(f.app)).url for f in fakes]
    router = serve_router(stack, urls, policy="round-robin", **FAST)
    stack.callback(thaw, *fakes)  # first thing on exit: hung handlers return, servers stop at once
    return router


def thaw(*fakes: FakeReplica) -> None:
    for fake in fakes:
        fake.frozen.clear()
        fake.mode = "ok"


def test_a_request_waiting_on_a_frozen_replica_is_retried_on_another(stack: ExitStack) -> None:
    frozen, ok = FakeReplica("hang"), FakeReplica("ok")
    router = serve(stack, frozen, ok)
    answers: list[httpx.Response] = []
    clients = [
        threading.Thread(
            target=lambda: answers.append(
                httpx.post(router + "/v1/completions", json=PROMPT, timeout=30)
            )
        )
        for _ in range(2)
    ]
    start = time.monotonic()
    for client in clients:
        client.start()
    while frozen.calls == 0:
        time.sleep(0.02)
    frozen.frozen.set()  # now its health checks hang too
    for client in clients:
        client.join(30)
    assert [a.status_code for a in answers] == [200, 200]
    assert time.monotonic() - start < 5  # not --request-timeout-s
    assert ok.calls == 2


def stream_events(
    router: str, fake: FakeReplica, after: int, action: threading.Event
) -> tuple[list[str], float]:
    """The stream's data lines; `action` is set after `after` events; seconds from then to the
    end."""
    events, acted_at = [], 0.0
    with httpx.stream(
        "POST", router + "/v1/completions", json={**PROMPT, "stream": True}, timeout=30
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
            if len(events) == after and not acted_at:
                action.set()
                acted_at = time.monotonic()
            if len(events) > 60:
                break
    return events, time.monotonic() - acted_at


def test_a_stream_from_a_replica_that_freezes_ends_with_an_error_event_soon(
    stack: ExitStack,
) -> None:
    fake = FakeReplica("slow")
    events, seconds = stream_events(serve(stack, fake), fake, 3, fake.frozen)
    error = json.loads(events[-2])["error"]
    assert error["code"] == "replica_failed" and "stalled" in error["message"]
    assert events[-1] == "[DONE]"
    assert seconds < 5


def test_a_replica_that_fails_a_health_check_but_keeps_streaming_keeps_its_stream(
    stack: ExitStack,
) -> None:
    fake = FakeReplica("slow")
    events, _ = stream_events(serve(stack, fake), fake, 3, fake.health_down)
    assert len(events) > 60  # ~3 s of chunks, well past --stall-eject-s, and no error
    assert all("error" not in event for event in events)
