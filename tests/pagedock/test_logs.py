"""JSON log lines (pagedock/logs.py) and the request ids they carry
(pagedock/http/request_context.py)."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from pagedock.errors import ConfigError
from pagedock.http.request_context import RequestContextMiddleware, valid_traceparent
from pagedock.logs import JsonFormatter, check_log_format
from pagedock.request_ids import RequestIds, current_request, remember, remembered

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("pagedock.test", logging.INFO, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_line_is_one_json_object_with_time_level_logger_and_message() -> None:
    line = json.loads(JsonFormatter().format(record("hello %s")))
    assert line["level"] == "INFO" and line["logger"] == "pagedock.test"
    assert line["message"] == "hello %s" and line["ts"].endswith("Z")


def test_a_records_fields_replace_its_message_and_the_requests_ids_join_them() -> None:
    token = current_request.set(RequestIds("abc", TRACEPARENT))
    try:
        fields = {"event": "request_finished", "x_request_id": "own"}
        line = json.loads(JsonFormatter().format(record("{...}", fields=fields)))
    finally:
        current_request.reset(token)
    assert line["event"] == "request_finished" and "message" not in line
    assert line["x_request_id"] == "own"  # its own fields win
    assert (line["trace_id"], line["span_id"]) == (TRACE_ID, SPAN_ID)


def test_an_exception_is_in_the_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        made = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "ValueError: boom" in json.loads(JsonFormatter().format(made))["exception"]


def test_an_unknown_format_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="--log-format must be one of text, json"):
        check_log_format("yaml")


@pytest.mark.parametrize(
    ("header", "valid"),
    [
        (TRACEPARENT, TRACEPARENT),
        (TRACEPARENT.upper(), TRACEPARENT),
        (f"00-{'0' * 32}-{SPAN_ID}-01", None),
        (f"ff-{TRACE_ID}-{SPAN_ID}-01", None),
        (f"00-short-{SPAN_ID}-01", None),
        (None, None),
    ],
)
def test_only_a_valid_traceparent_is_kept(header: str | None, valid: str | None) -> None:
    assert valid_traceparent(header) == valid


def app_recording_fields(seen: list[dict[str, str]]) -> FastAPI:
    app = FastAPI()

    @app.get("/")
    def root() -> dict[str, str]:
        ids = current_request.get()
        assert ids is not None
        seen.append(ids.log_fields())
        remember("generation-1")
        return ids.log_fields()

    app.add_middleware(RequestContextMiddleware)
    return app


def test_the_middleware_sets_the_requests_ids_and_answers_with_its_request_id() -> None:
    seen: list[dict[str, str]] = []
    client = TestClient(app_recording_fields(seen))
    given = client.get("/", headers={"x-request-id": "req-7", "traceparent": TRACEPARENT})
    assert seen[-1] == {"x_request_id": "req-7", "trace_id": TRACE_ID, "span_id": SPAN_ID}
    assert given.headers["x-request-id"] == "req-7"
    assert remembered("generation-1") == RequestIds("req-7", TRACEPARENT)  # for later lines
    made = client.get("/")
    assert made.headers["x-request-id"] == seen[-1]["x_request_id"] != "req-7"
    assert "trace_id" not in seen[-1]
    assert current_request.get() is None  # nothing leaks out of the request
