"""Who a request to the engine's server belongs to, and the priority it runs at
(engine/server/tenancy/tenant_resolver.py); no model needed."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from engine.server.tenancy.tenant_resolver import MAX_HEADER_TENANTS, OTHER_TENANT, TenantResolver
from pagedock.http.errors import APIError
from pagedock.http.internal_key import INTERNAL_KEY_HEADER
from pagedock.protocol import CompletionRequest
from pagedock.tenancy.tenants import TENANT_HEADER, parse_tenants

TABLE = parse_tenants(
    {
        "priority_classes": {"interactive": 0, "batch": 10},
        "default_priority": "batch",
        "tenants": [
            {"name": "chat", "api_keys": ["sk-chat"], "priority": "interactive"},
            {"name": "sweep", "api_keys": ["sk-sweep"]},
        ],
    }
)


def request(**headers: str) -> Request:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


def bearer(key: str, **headers: str) -> Request:
    return request(authorization=f"Bearer {key}", **headers)


def internal(key: str, tenant: str) -> dict[str, str]:
    return {INTERNAL_KEY_HEADER.replace("-", "_"): key, TENANT_HEADER.replace("-", "_"): tenant}


def test_with_a_tenants_file_a_request_is_the_tenant_of_its_key() -> None:
    resolver = TenantResolver(TABLE)
    assert resolver.resolve(bearer("sk-chat")).name == "chat"
    for refused in (request(), bearer("sk-unknown"), request(authorization="Basic sk-chat")):
        with pytest.raises(APIError) as e:
            resolver.resolve(refused)
        assert (e.value.status_code, e.value.code) == (401, "invalid_api_key")
        assert e.value.headers == {"WWW-Authenticate": "Bearer"}


def test_the_api_key_beside_a_tenants_file_is_the_default_tenant() -> None:
    resolver = TenantResolver(TABLE, api_key="sk-operator")
    tenant = resolver.resolve(bearer("sk-operator"))
    assert (tenant.name, tenant.priority, tenant.requests_per_minute) == ("default", 0, None)


def test_a_tenant_header_names_the_tenant_instead_of_the_key() -> None:
    resolver = TenantResolver(TABLE, tenant_header="x-team")
    assert resolver.resolve(request(x_team="sweep")).name == "sweep"
    with pytest.raises(APIError, match="x-team header names no tenant"):
        resolver.resolve(bearer("sk-chat", x_team="nobody"))


def test_a_router_names_a_listed_tenant_only_with_the_internal_key() -> None:
    resolver = TenantResolver(TABLE, internal_api_key="fleet")
    assert resolver.resolve(request(**internal("fleet", "sweep"))).name == "sweep"
    with pytest.raises(APIError):
        resolver.resolve(request(**internal("a guess", "sweep")))
    open_resolver = TenantResolver(TABLE)  # no internal key: the header proves nothing
    with pytest.raises(APIError):
        open_resolver.resolve(request(x_pagedock_tenant="sweep"))


def test_without_tenants_the_routers_header_labels_the_request_when_trusted() -> None:
    assert TenantResolver(None).resolve(request(x_pagedock_tenant="team-a")).name == "team-a"
    guarded = TenantResolver(None, internal_api_key="fleet")
    assert guarded.resolve(request(x_pagedock_tenant="team-a")).name == "default"
    assert guarded.resolve(request(**internal("fleet", "team-a"))).name == "team-a"
    assert guarded.resolve(request()).name == "default"


def test_header_named_tenants_are_bounded() -> None:
    resolver = TenantResolver(None)
    names = [resolver.resolve(request(x_pagedock_tenant=f"t{i}")).name for i in range(70)]
    assert names[:MAX_HEADER_TENANTS] == [f"t{i}" for i in range(MAX_HEADER_TENANTS)]
    assert set(names[MAX_HEADER_TENANTS:]) == {OTHER_TENANT}
    assert resolver.resolve(request(x_pagedock_tenant="t3")).name == "t3"  # known: still itself
    fresh = TenantResolver(None)
    assert fresh.resolve(request(x_pagedock_tenant="no spaces!")).name == OTHER_TENANT


def test_a_tenant_bounds_the_priority_its_requests_ask_for() -> None:
    resolver = TenantResolver(TABLE)
    chat, sweep = TABLE.tenants["chat"], TABLE.tenants["sweep"]
    body = CompletionRequest(prompt="hi")
    assert resolver.priority(sweep, body) == 10  # none asked: the tenant's
    assert resolver.priority(chat, CompletionRequest(prompt="hi", priority=-5)) == 0
    assert resolver.priority(sweep, CompletionRequest(prompt="hi", priority=20)) == 20
    assert resolver.known_priorities() == {0, 10}
    assert TenantResolver(None).priority(chat, CompletionRequest(prompt="hi", priority=-5)) == -5
