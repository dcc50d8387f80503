"""pagedock/http/errors.py: the one OpenAI error shape, as the engine's server and the router
both answer it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi import FastAPI

from pagedock.http.errors import APIError, error_body, error_json, error_response, error_type
from pagedock.protocol import ErrorResponse
from tests.protocol.apps import client, router_app, server_app

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    499: "invalid_request_error",
    500: "server_error",
    502: "server_error",
    503: "service_unavailable_error",
}


@pytest.mark.parametrize(("status", "expected"), TYPES.items())
def test_each_status_has_openais_error_type(status: int, expected: str) -> None:
    assert error_type(status) == expected
    assert error_body(status, "m")["error"]["type"] == expected


def test_the_body_has_exactly_openais_fields_in_order() -> None:
    body = error_body(400, "bad n", param="n", code="invalid_value")
    assert list(body) == ["error"]
    assert body["error"] == {
        "message": "bad n",
        "type": "invalid_request_error",
        "param": "n",
        "code": "invalid_value",
    }
    assert list(body["error"]) == ["message", "type", "param", "code"]
    assert ErrorResponse.model_validate(body).model_dump() == body


def test_param_and_code_default_to_null() -> None:
    assert json.loads(error_json(500, "boom")) == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": None}
    }


def test_error_json_is_the_body_as_json_text() -> None:
    assert error_json(429, "busy", code="queue_full") == json.dumps(
        error_body(429, "busy", code="queue_full")
    )


def test_an_api_errors_response_carries_its_status_body_and_headers() -> None:
    error = APIError(429, "busy", code="queue_full", headers={"Retry-After": "1"})
    response = error_response(error)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert json.loads(bytes(response.body)) == error_body(429, "busy", code="queue_full")


APPS: dict[str, Callable[[], FastAPI]] = {"server": server_app, "router": router_app}


@pytest.mark.parametrize("make_app", APPS.values(), ids=APPS.keys())
def test_an_unknown_route_is_a_404_in_openais_shape(make_app: Callable[[], FastAPI]) -> None:
    response = client(make_app()).get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json() == error_body(404, "Not Found")


@pytest.mark.parametrize("make_app", APPS.values(), ids=APPS.keys())
def test_a_wrong_method_is_a_405_in_openais_shape(make_app: Callable[[], FastAPI]) -> None:
    response = client(make_app()).get("/v1/completions")
    assert response.status_code == 405
    assert response.json() == error_body(405, "Method Not Allowed")
    assert "POST" in response.headers["allow"]


def test_server_and_router_answer_an_unknown_route_byte_for_byte_alike() -> None:
    server, router = (client(make()).get("/v1/nothing-here") for make in APPS.values())
    assert server.content == router.content
    assert server.headers["content-type"] == router.headers["content-type"]
