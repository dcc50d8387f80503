"""classify_upstream: whether a replica's error answer is the request's failure or the replica's."""

from __future__ import annotations

import json

import pytest

from router.http.upstream_errors import Verdict, classify_upstream


def openai_error(code: str | None) -> bytes:
    return json.dumps(
        {"error": {"message": "m", "type": "t", "param": None, "code": code}}
    ).encode()


def test_a_pagedock_engine_error_500_is_the_requests_failure() -> None:
    assert classify_upstream(500, openai_error("engine_error")) is Verdict.FORWARD


def test_a_vllm_500_with_its_error_body_is_the_requests_failure() -> None:
    body = json.dumps(
        {"object": "error", "message": "m", "type": "InternalServerError", "code": 500}
    )
    assert classify_upstream(500, body.encode()) is Verdict.FORWARD


@pytest.mark.parametrize(
    "body", [b"", b"Internal Server Error", b"[]", b'{"detail": "x"}', openai_error("engine_dead")]
)
def test_a_500_without_a_request_error_body_is_the_replicas_failure(body: bytes) -> None:
    assert classify_upstream(500, body) is Verdict.REPLICA_FAILED


@pytest.mark.parametrize(
    "status, code", [(503, "engine_dead"), (503, "draining"), (502, None), (504, None)]
)
def test_gateway_errors_and_503s_are_the_replicas_failure(status: int, code: str | None) -> None:
    assert classify_upstream(status, openai_error(code)) is Verdict.REPLICA_FAILED


def test_a_429_is_tried_elsewhere_without_blaming_the_replica() -> None:
    assert classify_upstream(429, openai_error("queue_full")) is Verdict.TRY_ELSEWHERE


@pytest.mark.parametrize("status", [400, 401, 404, 413])
def test_other_4xx_are_forwarded(status: int) -> None:
    assert classify_upstream(status, openai_error(None)) is Verdict.FORWARD
