"""The tracing CPU-cost benchmark's parts (benchmarks/tracing_cpu_cost.py): its requests get the
spans the overhead benchmark's measured requests got, and a short run counts every span sent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.tracing_cpu_cost import (
    finished_requests,
    measure,
    server_seconds_per_request,
    spans_per_request,
)


def test_the_requests_carry_workload_as_shape_and_a_traceparent_each() -> None:
    made = finished_requests(12, seed=1)
    assert [len(f.timing.prefill_chunks) + 4 for f in made] == [
        spans_per_request(i) for i in range(12)
    ]
    assert all(f.timing.num_generated_tokens == 128 for f in made)


def test_a_short_run_exports_every_span_it_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "200000")
    measured = measure(argparse.Namespace(num_requests=30, repetitions=1))
    assert len(measured["cpu_s"]["on"]) == len(measured["cpu_s"]["off"]) == 1
    assert len(measured["per_request_us"]) == 1


def test_the_servers_time_per_request_is_the_median_off_run(tmp_path: Path) -> None:
    runs = [
        {"system": "off", "duration_s": 100.0, "num_requests": 64},
        {"system": "on", "duration_s": 10.0, "num_requests": 64},
        {"system": "off", "duration_s": 80.0, "num_requests": 64},
        {"system": "off", "duration_s": 90.0, "num_requests": 64},
    ]
    result = tmp_path / "overhead.json"
    result.write_text(json.dumps({"runs": runs}))
    assert server_seconds_per_request(result) == 90.0 / 64
