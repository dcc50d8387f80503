"""One trace from the caller through the router to an engine (issue 38): a router in front of a
replica that answers 503 and two real engines, all exporting to an OTLP receiver in the test
process. A request that meets the 503 first is one trace: the router's `router_request` under
the caller's span, its `route` decision and one `upstream` span per try (the failed one ERROR,
a `failover` event on the request), and the engine's `llm_request` under the try that reached
it. A request for a model nobody serves is an ERROR span with the router's 404."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.eventually import eventually_sync
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.live import (
    Process,
    replica_process,
    replica_view,
    router_process,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, OtlpReceiver]]:
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))
    logs = tmp_path_factory.mktemp("logs")
    with ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export within 50 ms, not 5 s
        receiver = stack.enter_context(OtlpReceiver())
        traced = ("--otlp-traces-endpoint", receiver.url)
        busy = stack.enter_context(ServerThread(FakeReplica("unavailable").app))
        engines = [replica_process(model, logs, 128, *traced) for _ in range(2)]
        urls = [busy.url] + [e.url for e in engines]
        router = router_process(model, logs, urls, "--policy", "round-robin", *traced)
        for process in (*engines, router):
            process.start()
            stack.callback(process.kill)
        for process in (*engines, router):
            process.wait_ready()
        # Every replica a candidate before the first request (the router is ready with one).
        wait_until(lambda: all(replica_view(router).get(u, {}).get("healthy") for u in urls), 30)
        yield router, receiver


def spans(receiver: OtlpReceiver, trace_id: str, *names: str) -> dict[str, list[ReceivedSpan]]:
    """The trace's spans by name, once every name in `names` is there."""

    def complete() -> dict[str, list[ReceivedSpan]] | None:
        found: dict[str, list[ReceivedSpan]] = {}
        for span in receiver.trace(trace_id):
            found.setdefault(span.name, []).append(span)
        return found if all(n in found for n in names) else None

    seen = eventually_sync(complete, 30, lambda: str([s.name for s in receiver.trace(trace_id)]))
    assert isinstance(seen, dict)
    return seen


def test_a_failover_is_one_trace_from_the_caller_to_the_engine(
    fleet: tuple[Process, OtlpReceiver],
) -> None:
    router, receiver = fleet
    body = {"prompt": "The paged cache", "max_tokens": 3, "ignore_eos": True}
    for attempt in range(6):  # round-robin: one of the first three meets the 503 first
        trace_id = f"{attempt + 1:032x}"
        headers = {"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}
        response = httpx.post(f"{router.url}/v1/completions", json=body, headers=headers)
        assert response.status_code == 200, response.text
        found = spans(receiver, trace_id, "router_request", "route", "upstream", "llm_request")
        [request] = found["router_request"]
        if "failover" in request.events:
            break
    else:
        raise AssertionError("no request met the replica that answers 503")
    assert request.parent_span_id == CALLER_SPAN and request.service == "pagedock-router"
    [route] = found["route"]
    assert route.parent_span_id == request.span_id
    assert route.attributes["pagedock.route.reason"] == "round-robin"
    assert len(route.attributes["pagedock.route.candidates"]) == 3
    failed = [s for s in found["upstream"] if s.status_code == 2]
    served = [s for s in found["upstream"] if s.status_code != 2]
    assert len(failed) == 1 and failed[0].attributes["http.response.status_code"] == 503
    [engine] = found["llm_request"]
    assert engine.service == "pagedock-engine"
    assert [engine.parent_span_id] == [s.span_id for s in served]
    assert request.start_ns <= engine.start_ns and engine.end_ns <= request.end_ns


def test_a_refused_request_is_an_error_span(fleet: tuple[Process, OtlpReceiver]) -> None:
    router, receiver = fleet
    trace_id = "e" * 32
    headers = {"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}
    body = {"model": "nobody-serves-this", "prompt": "x", "max_tokens": 1}
    response = httpx.post(f"{router.url}/v1/completions", json=body, headers=headers)
    assert response.status_code == 404
    [request] = spans(receiver, trace_id, "router_request")["router_request"]
    assert request.status_code == 2 and request.attributes["http.response.status_code"] == 404
    assert "nobody-serves-this" in request.status_message
