"""The tracing-overhead benchmark's own parts (benchmarks/tracing_overhead.py), without a server:
the traceparents it sends, how it counts a receiver's spans, and how it sums up the runs."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks.traced_load import trace_id_of, traceparents
from benchmarks.tracing_report import REQUEST_SPANS, count_spans, summarize_runs
from tests.otlp_receiver import OtlpReceiver


def test_each_request_gets_a_sampled_traceparent_of_its_own_the_same_each_run() -> None:
    headers = traceparents(50, seed=3)
    assert all(re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", h) for h in headers)
    assert len({trace_id_of(h) for h in headers}) == 50
    assert traceparents(50, seed=3) == headers
    assert traceparents(50, seed=4) != headers


def export_request(traces: dict[str, list[str]]) -> bytes:
    """An OTLP export of spans named as given, in one trace per key (hex trace id)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    attribute = resource.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "pagedock-engine"
    scope = resource.scope_spans.add()
    for n, (trace_id, names) in enumerate(traces.items()):
        for k, name in enumerate(names):
            span = scope.spans.add()
            span.name = name
            span.trace_id = bytes.fromhex(trace_id)
            span.span_id = (n * 100 + k + 1).to_bytes(8, "big")
            span.start_time_unix_nano, span.end_time_unix_nano = 1, 2
    return request.SerializeToString()


def test_the_receivers_spans_are_counted_per_measured_request() -> None:
    full, short, warmup = "aa" * 16, "bb" * 16, "cc" * 16
    traces = {
        full: [*REQUEST_SPANS, "prefill_chunk"],
        short: ["llm_request", "queue", "prefill"],  # no decode
        warmup: list(REQUEST_SPANS),
    }
    with OtlpReceiver() as receiver:
        response = httpx.post(
            receiver.url,
            content=export_request(traces),
            headers={"Content-Type": "application/x-protobuf"},
        )
        assert response.status_code == 200
        counted = count_spans(list(receiver.spans), [full, short])
    assert counted["spans_received"] == 12
    assert counted["spans_measured"] == 8
    assert counted["measured_requests"] == 2
    assert counted["min_spans_per_request"] == 3
    assert counted["spans_per_request"] == 4.0
    assert counted["requests_not_fully_traced"] == 1
    assert counted["by_name"] == {
        "decode": 2,
        "llm_request": 3,
        "prefill": 3,
        "prefill_chunk": 1,
        "queue": 3,
    }


def test_a_measured_request_with_no_spans_is_not_traced() -> None:
    spans = count_spans([], ["dd" * 16])
    assert spans["min_spans_per_request"] == 0 and spans["requests_not_fully_traced"] == 1


def run(arm: str, rep: int, tok_s: float, spans: int = 0, **over: Any) -> dict[str, Any]:
    traced = spans >= len(REQUEST_SPANS)
    return {
        "system": arm,
        "repetition": rep,
        "output_tok_s": tok_s,
        "ttft_p50_ms": 100.0 + rep,
        "ttft_p99_ms": 300.0,
        "itl_p50_ms": 30.0,
        "e2e_p50_ms": 4000.0,
        "duration_s": 20.0,
        "num_errors": 0,
        "spans": {
            "spans_received": spans * 64,
            "min_spans_per_request": spans,
            "requests_not_fully_traced": 0 if traced or arm == "off" else 64,
        },
        **over,
    }


def runs_of(on: list[float], off: list[float], spans: int = 5) -> list[dict[str, Any]]:
    out = []
    for rep, (a, b) in enumerate(zip(off, on, strict=True)):
        out += [run("off", rep, a), run("on", rep, b, spans)]
    return out


def test_a_cost_within_three_percent_passes_with_the_median_and_each_pair() -> None:
    result = summarize_runs(runs_of(on=[392.0, 380.0, 400.0], off=[400.0, 390.0, 405.0]))
    assert result["summary"]["on"]["output_tok_s"] == {
        "median": 392.0,
        "min": 380.0,
        "max": 400.0,
        "n": 3,
    }
    tok_s = result["ratios"][0]
    assert tok_s["figure"] == "output_tok_s" and tok_s["system"] == "on"
    assert tok_s["of_medians"] == pytest.approx(392 / 400)
    assert tok_s["pair_min"] == pytest.approx(380 / 390)
    assert [r["figure"] for r in result["ratios"]] == ["output_tok_s", "ttft_p50_ms", "ttft_p99_ms"]
    assert result["per_pair_tok_s_ratios"] == [0.98, round(380 / 390, 4), round(400 / 405, 4)]
    verdict = result["verdict"]
    assert verdict["pass"] and verdict["every_on_request_traced"] and verdict["off_sent_no_spans"]
    assert verdict["cost_pct"] == 2.0


def test_a_cost_over_three_percent_fails() -> None:
    result = summarize_runs(runs_of(on=[380.0, 380.0, 380.0], off=[400.0, 400.0, 400.0]))
    assert result["verdict"]["tok_s_on_over_off"] == 0.95
    assert not result["verdict"]["pass"]


def test_an_on_arm_that_did_not_trace_fails_however_fast() -> None:
    result = summarize_runs(runs_of(on=[400.0], off=[400.0], spans=3))
    assert not result["verdict"]["every_on_request_traced"]
    assert not result["verdict"]["pass"]


def test_an_off_arm_that_sent_spans_or_a_failed_request_fails() -> None:
    runs = runs_of(on=[400.0], off=[400.0])
    runs[0]["spans"]["spans_received"] = 4
    assert not summarize_runs(runs)["verdict"]["off_sent_no_spans"]
    runs = runs_of(on=[400.0], off=[400.0])
    runs[1]["num_errors"] = 1
    assert summarize_runs(runs)["verdict"]["request_errors"] == 1
    assert not summarize_runs(runs)["verdict"]["pass"]
