"""A real `pagedock serve` tracing to an OTLP receiver in the test process: each request is an
`llm_request` span under the caller's W3C traceparent, with its queue, prefill and decode spans
nested in it, the model and tenant on it, and an aborted request's status ERROR. Off, neither the
SDK nor the exporter is imported (FastAPI imports OpenTelemetry's API itself when it is there)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually_sync
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(
    long_tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, OtlpReceiver]]:
    with OtlpReceiver() as receiver:
        # The long-context tiny model: a request can run for seconds, to be left mid-stream.
        traced = ("--otlp-traces-endpoint", receiver.url, "--max-num-batched-tokens", "16")
        args = tiny_server_args(long_tiny_model_dir, *traced)
        log = tmp_path_factory.mktemp("logs") / "traced.log"
        server = start_server(args, log, env={"OTEL_BSP_SCHEDULE_DELAY": "50"})
        try:
            yield server, receiver
        finally:
            server.stop()


@pytest.fixture(scope="module")
def model_name(long_tiny_model_dir: Path) -> str:
    return long_tiny_model_dir.name


def spans_of(receiver: OtlpReceiver, trace_id: str, count: int) -> list[ReceivedSpan]:
    return eventually_sync(
        lambda: (s := receiver.trace(trace_id)) and len(s) >= count and s,
        30,
        lambda: f"{count} spans of trace {trace_id}: {[s.name for s in receiver.trace(trace_id)]}",
    )


def test_a_request_is_a_span_under_the_callers_with_its_phases_nested(
    traced: tuple[ServerProcess, OtlpReceiver], model_name: str
) -> None:
    server, receiver = traced
    headers = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01", "x-request-id": "req-1"}
    body = {"model": model_name, "prompt": "Hello there", "max_tokens": 4, "ignore_eos": True}
    response = httpx.post(f"{server.url}/v1/completions", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "req-1"
    spans = {s.name: s for s in spans_of(receiver, TRACE_ID, 4)}
    request = spans["llm_request"]
    assert request.parent_span_id == CALLER_SPAN and request.service == "pagedock-engine"
    assert request.attributes["gen_ai.usage.completion_tokens"] == 4
    assert request.attributes["pagedock.model"] == model_name
    assert request.attributes["pagedock.tenant"] == "default"
    assert request.status_code == 0
    phases = [spans[name] for name in ("queue", "prefill", "decode")]
    assert all(p.parent_span_id == request.span_id for p in phases)
    assert request.start_ns <= phases[0].start_ns <= phases[0].end_ns <= phases[1].start_ns
    assert phases[1].end_ns <= phases[2].start_ns <= phases[2].end_ns <= request.end_ns


def test_each_prefill_chunk_is_a_span_in_the_prefill(
    traced: tuple[ServerProcess, OtlpReceiver], model_name: str
) -> None:
    server, receiver = traced
    trace_id = "cd" * 16
    headers = {"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}
    body = {"model": model_name, "prompt": "one two three four five six " * 8, "max_tokens": 1}
    response = httpx.post(f"{server.url}/v1/completions", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    prompt_tokens = response.json()["usage"]["prompt_tokens"]
    found = spans_of(receiver, trace_id, 4 + prompt_tokens // 16)
    [prefill] = [s for s in found if s.name == "prefill"]
    chunks = sorted((s for s in found if s.name == "prefill_chunk"), key=lambda s: s.start_ns)
    assert len(chunks) >= prompt_tokens // 16 >= 2  # --max-num-batched-tokens 16
    assert sum(c.attributes["pagedock.num_tokens"] for c in chunks) == prompt_tokens
    assert all(c.parent_span_id == prefill.span_id for c in chunks)
    assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(chunks))


def test_a_guided_requests_grammar_wait_is_a_span(
    traced: tuple[ServerProcess, OtlpReceiver], model_name: str
) -> None:
    server, receiver = traced
    trace_id = "ef" * 16
    headers = {"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}
    body = {
        "model": model_name,
        "prompt": "Yes or no?",
        "max_tokens": 4,
        "structured_outputs": {"choice": ["yes", "no"]},
    }
    response = httpx.post(f"{server.url}/v1/completions", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    found = {s.name: s for s in spans_of(receiver, trace_id, 5)}
    compiling, request = found["structured_output_compile"], found["llm_request"]
    assert compiling.parent_span_id == request.span_id
    assert request.start_ns <= compiling.start_ns <= compiling.end_ns <= found["prefill"].start_ns


def test_a_request_without_a_traceparent_starts_its_own_trace(
    traced: tuple[ServerProcess, OtlpReceiver], model_name: str
) -> None:
    server, receiver = traced
    before = {s.trace_id for s in receiver.spans}
    body = {"model": model_name, "prompt": "Hi", "max_tokens": 2}
    assert httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).status_code == 200
    roots = eventually_sync(
        lambda: [
            s for s in list(receiver.spans) if s.name == "llm_request" and s.trace_id not in before
        ],
        30,
        "a new trace",
    )
    assert roots[0].parent_span_id == ""


def test_an_aborted_request_is_an_error_span(
    traced: tuple[ServerProcess, OtlpReceiver], model_name: str
) -> None:
    server, receiver = traced
    trace_id = "ab" * 16
    headers = {"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}
    body = {"model": model_name, "prompt": "Go on", "max_tokens": 4000, "stream": True}
    body["ignore_eos"] = True
    with httpx.stream(
        "POST", f"{server.url}/v1/completions", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        next(response.iter_lines())  # the first chunk: it runs; then the client leaves
    spans = {s.name: s for s in spans_of(receiver, trace_id, 1)}
    assert spans["llm_request"].status_code == 2
    assert "abort" in spans["llm_request"].status_message


def test_tracing_off_imports_neither_the_sdk_nor_the_exporter() -> None:
    code = (
        "import sys; from engine.server.openai.context import ServerOptions; "
        "from engine.server import serve, request_tracer; ServerOptions(); "
        "print(any(m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter')) "
        "for m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
