"""pagedock/http/auth.py: the one API-key guard, on the engine's server and on the router."""

from __future__ import annotations

import hmac
from collections.abc import Callable

import pytest
from fastapi import FastAPI

from pagedock.http.auth import INVALID_API_KEY_MESSAGE, check_api_key
from pagedock.http.errors import APIError, error_body
from tests.protocol.apps import client, router_app, server_app

KEY = "sekret"
APPS: dict[str, Callable[..., FastAPI]] = {"server": server_app, "router": router_app}
GUARDED = {
    "server": [("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/tokenize")],
    "router": [
        ("GET", "/v1/models"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/router/replicas"),
    ],
}
UNAUTHORIZED = error_body(401, INVALID_API_KEY_MESSAGE, code="invalid_api_key")


@pytest.fixture(params=list(APPS))
def side(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Bearer {KEY}x", KEY, f"Basic {KEY}", "Bearer "],
    ids=["missing", "wrong", "prefix-of-a-longer-guess", "no-scheme", "basic", "empty"],
)
def test_a_missing_or_wrong_key_is_a_401_with_www_authenticate(
    side: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    http = client(APPS[side](api_key=KEY), **headers)
    for method, path in GUARDED[side]:
        response = http.request(method, path, json={})
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json() == UNAUTHORIZED


def test_the_right_key_passes_the_guard(side: str) -> None:
    for scheme in ("Bearer", "bearer"):
        response = client(APPS[side](api_key=KEY), Authorization=f"{scheme} {KEY}").get(
            "/v1/models"
        )
        # The server lists its model; the router, knowing no replica, says so: past the guard.
        assert response.status_code == (200 if side == "server" else 503)


def test_without_a_key_configured_nothing_is_asked(side: str) -> None:
    response = client(APPS[side](api_key=None)).get("/v1/models")
    assert response.status_code != 401


def test_health_needs_no_key(side: str) -> None:
    response = client(APPS[side](api_key=KEY)).get("/health")
    assert response.status_code != 401


def test_the_routers_replica_list_opens_to_the_key() -> None:
    response = client(router_app(api_key=KEY), Authorization=f"Bearer {KEY}").get(
        "/router/replicas"
    )
    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_the_api_docs_and_schema_are_off_when_a_key_is_set(side: str, path: str) -> None:
    assert (
        client(APPS[side](api_key=KEY), Authorization=f"Bearer {KEY}").get(path).status_code == 404
    )


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_the_api_docs_and_schema_are_served_without_a_key(side: str, path: str) -> None:
    assert client(APPS[side](api_key=None)).get(path).status_code == 200


def test_server_and_router_refuse_a_key_byte_for_byte_alike() -> None:
    server, router = (client(make(api_key=KEY)).get("/v1/models") for make in APPS.values())
    assert (server.status_code, server.content) == (router.status_code, router.content)
    assert server.headers["www-authenticate"] == router.headers["www-authenticate"]


def test_the_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real_compare = hmac.compare_digest

    def compare(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare)
    check_api_key(KEY, KEY)
    with pytest.raises(APIError):
        check_api_key(KEY, "guess")
    with pytest.raises(APIError):
        check_api_key(KEY, None)
    assert calls == [(KEY.encode(), KEY.encode()), (b"guess", KEY.encode()), (b"", KEY.encode())]


def test_no_configured_key_lets_anything_through() -> None:
    check_api_key(None, None)
    check_api_key(None, "whatever")
