"""GET /drain's figures: the longest and p99 durations of a bounded window of finished requests,
the age of the oldest request in flight, and the drain timeout and handoff time the server runs
with (engine/server/request_durations.py, engine/server/drain.py)."""

from __future__ import annotations

import httpx
import pytest

from engine.core.request import RequestTiming
from engine.server.drain import HANDOFF_SECONDS, drain_report
from engine.server.metrics import EngineMetrics
from engine.server.openai.context import ServerContext, ServerOptions
from engine.server.request_durations import RequestDurations
from tests.eventually import eventually
from tests.server.server_process import ServerProcess


def finished(durations: RequestDurations, *seconds: float, arrival: float = 100.0) -> None:
    for s in seconds:
        durations.observe_finished(RequestTiming(arrival, finished_time=arrival + s))


def make_context(drain_timeout: float = 30.0) -> ServerContext:
    return ServerContext(
        engine=None,  # type: ignore[arg-type]
        metrics=EngineMetrics("tiny"),
        kv_hub=None,  # type: ignore[arg-type]
        tokenizer=None,
        served_model_name="tiny",
        model_root="/models/tiny",
        max_model_len=64,
        options=ServerOptions(drain_timeout=drain_timeout),
    )


def test_nothing_finished_nothing_open_reports_no_figures() -> None:
    summary = RequestDurations().summary()

    assert summary.num_requests == 0
    assert summary.longest_request_seconds is None
    assert summary.p99_request_seconds is None
    assert summary.oldest_in_flight_seconds is None


def test_longest_and_p99_of_the_finished_requests() -> None:
    durations = RequestDurations()
    finished(durations, *[1.0] * 98, 7.5, 42.0)

    summary = durations.summary()

    assert summary.num_requests == 100
    assert summary.longest_request_seconds == 42.0
    assert summary.p99_request_seconds == 7.5  # nearest rank: the 99th of 100


def test_only_the_last_window_of_finished_requests_counts() -> None:
    durations = RequestDurations(window=3)
    finished(durations, 50.0, 2.0, 3.0, 4.0)

    summary = durations.summary()

    assert summary.num_requests == 3
    assert summary.longest_request_seconds == 4.0


def test_the_oldest_open_request_is_reported_until_it_closes() -> None:
    durations = RequestDurations()
    durations.begin("old", arrival_time=10.0)
    durations.begin("new", arrival_time=25.0)

    assert durations.summary(now=40.0).oldest_in_flight_seconds == 30.0
    durations.end("old")
    durations.end("old")  # idempotent
    assert durations.summary(now=40.0).oldest_in_flight_seconds == 15.0
    durations.end("new")
    assert durations.summary(now=40.0).oldest_in_flight_seconds is None


def test_a_window_must_hold_a_request() -> None:
    with pytest.raises(ValueError, match="window"):
        RequestDurations(window=0)


def test_the_report_names_the_deadline_and_the_time_needed_after_it() -> None:
    ctx = make_context(drain_timeout=45.0)
    finished(ctx.metrics.request_durations, 3.25, 12.5)

    report = drain_report(ctx)

    assert report["drain_timeout_seconds"] == 45.0
    assert report["handoff_seconds"] == HANDOFF_SECONDS
    assert report["draining"] is False
    assert report["num_requests"] == 2
    assert report["longest_request_seconds"] == 12.5
    assert report["oldest_in_flight_seconds"] is None


@pytest.mark.asyncio
async def test_a_server_reports_its_finished_request_at_get_drain(
    tiny_server: ServerProcess,
) -> None:
    body = {"prompt": "Hello", "max_tokens": 2}
    assert httpx.post(f"{tiny_server.url}/v1/completions", json=body).status_code == 200

    def report() -> dict:
        response = httpx.get(f"{tiny_server.url}/drain")
        assert response.status_code == 200
        return dict(response.json())

    # The finished request reaches the figures with the step's outputs, maybe after the response.
    await eventually(lambda: report()["num_requests"] >= 1, 10, lambda: f"GET /drain: {report()}")
    figures = report()
    assert figures["longest_request_seconds"] > 0
    assert figures["p99_request_seconds"] <= figures["longest_request_seconds"]
    assert figures["oldest_in_flight_seconds"] is None  # the request closed
    assert figures["handoff_seconds"] == HANDOFF_SECONDS
