"""The end-of-request log line (engine/server/request_log.py): its fields, with the tenant, the
adapter and the HTTP request's ids its generation remembered."""

from __future__ import annotations

import json
import logging

import pytest

from engine.core.request import RequestTiming
from engine.runtime.outputs import FinishedRequestStats
from engine.server.request_log import log_request_finished
from pagedock.logs import JsonFormatter
from pagedock.request_ids import RequestIds, current_request, remember


def test_the_line_carries_the_tenant_adapter_and_the_http_requests_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = current_request.set(RequestIds("req-9", f"00-{'ab' * 16}-{'cd' * 8}-01"))
    try:
        remember("gen42")  # as Generation.start does, in the request's context
    finally:
        current_request.reset(token)
    timing = RequestTiming(arrival_time=10.0, first_token_time=10.25, finished_time=11.0)
    timing.first_scheduled_time = 10.125
    timing.prefill_chunks = [(10.125, 10.25, 12)]
    timing.num_generated_tokens = 5
    finished = FinishedRequestStats(
        "gen42-0", None, 12, ["stop"], timing, lora_name="sql", tenant="team-a"
    )
    with caplog.at_level(logging.INFO, logger="pagedock.requests"):
        log_request_finished(finished, log_prompts=False)
    [made] = [r for r in caplog.records if r.name == "pagedock.requests"]
    line = json.loads(JsonFormatter().format(made))
    assert line["event"] == "request_finished" and line["request_id"] == "gen42-0"
    assert (line["tenant"], line["adapter"]) == ("team-a", "sql")
    assert (line["x_request_id"], line["trace_id"], line["span_id"]) == (
        "req-9",
        "ab" * 16,
        "cd" * 8,
    )
    assert (line["ttft_ms"], line["total_ms"], line["generated_tokens"]) == (250.0, 1000.0, 5)
    assert (line["queued_ms"], line["prefill_ms"], line["prefill_steps"]) == (125.0, 125.0, 1)
    assert json.loads(made.getMessage())["event"] == "request_finished"  # the text format's line
