"""TenantResolver: who a request to the engine's server belongs to, and the priority it runs at
(docs/server.md, "Tenants, priorities and quotas").

    --tenants FILE                  the tenant whose key the request presents
    --tenants --tenant-header H     the tenant header H names (a gateway authenticated the client)
    --tenants, from a router        the tenant the router names in x-pagedock-tenant, trusted only
                                    with the fleet's internal key (--internal-api-key set, and
                                    the request carries it)
    --tenants --api-key KEY         KEY's holders are the tenant "default" (no limits, priority
                                    0), as at the router: the operator's own key keeps working
    no --tenants                    "default" (behind --api-key as before), or the tenant a router
                                    names in x-pagedock-tenant, trusted when no internal key is set
                                    or the request carries it: for fairness and metrics only

With --tenants anything else is a 401 in OpenAI's shape, as a wrong API key is, and a request
runs at `Tenant.effective_priority` of the `priority` it asks for (never more urgently than its
tenant's); without, at the priority it asks for. Names from x-pagedock-tenant without a tenants
file are bounded: the first MAX_HEADER_TENANTS distinct ones are kept apart (metric labels,
fair-share counters), any later one, or one that is no tenant name, is "other".
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable

from fastapi import Request
from starlette.datastructures import Headers

from engine.inputs.engine_request import DEFAULT_TENANT
from pagedock.http.auth import bearer_key
from pagedock.http.errors import APIError
from pagedock.http.internal_key import has_internal_key
from pagedock.protocol.openai import SamplingFields
from pagedock.tenancy.tenants import TENANT_HEADER, TENANT_NAME_PATTERN, Tenant, TenantTable

MAX_HEADER_TENANTS = 64
OTHER_TENANT = "other"
_DEFAULT = Tenant(DEFAULT_TENANT)


class TenantResolver:
    def __init__(
        self,
        table: TenantTable | None,
        api_key: str | None = None,
        internal_api_key: str | None = None,
        tenant_header: str | None = None,
    ) -> None:
        self.table = table
        self.api_key = api_key
        self.internal_api_key = internal_api_key
        self.tenant_header = tenant_header
        self._header_names: set[str] = set()

    def known_priorities(self) -> set[int]:
        """The priorities the tenants run at by default (metric labels name only these)."""
        tenants = self.table.tenants.values() if self.table else ()
        return {0, *(t.priority for t in tenants)}

    def resolve(self, request: Request) -> Tenant:
        """The request's tenant, or the 401 (with a tenants file)."""
        if self.table is None:
            return self._forwarded(request)
        if self.internal_api_key is not None and has_internal_key(self.internal_api_key, request):
            forwarded = self.table.by_name(request.headers.get(TENANT_HEADER))
            if forwarded is not None:
                return forwarded
        return self._listed(self.table, request.headers)

    def priority(self, tenant: Tenant, body: SamplingFields) -> int:
        """The priority a request runs at: bounded by its tenant's with a tenants file."""
        if self.table is None:
            return body.priority
        asked = body.priority if "priority" in body.model_fields_set else None
        return tenant.effective_priority(asked)

    def _listed(self, table: TenantTable, headers: Headers) -> Tenant:
        key = bearer_key(headers)
        if self.api_key and key and hmac.compare_digest(key.encode(), self.api_key.encode()):
            return _DEFAULT
        if self.tenant_header is not None:
            tenant = table.by_name(headers.get(self.tenant_header))
        else:
            tenant = table.by_key(key)
        if tenant is None:
            raise APIError(
                401,
                _unknown_message(self.tenant_header),
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return tenant

    def _forwarded(self, request: Request) -> Tenant:
        """Without a tenants file: the tenant a trusted router names, else "default"."""
        name = request.headers.get(TENANT_HEADER)
        if name is None or not has_internal_key(self.internal_api_key, request):
            return _DEFAULT
        if name not in self._header_names:
            if len(self._header_names) >= MAX_HEADER_TENANTS or not re.fullmatch(
                TENANT_NAME_PATTERN, name
            ):
                return Tenant(OTHER_TENANT)
            self._header_names.add(name)
        return Tenant(name)


def tenant_guard(resolver: TenantResolver) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency: the request's tenant, in `request.state.tenant` (or the 401)."""

    async def resolve_tenant(request: Request) -> None:
        request.state.tenant = resolver.resolve(request)

    return resolve_tenant


def tenant_of(request: Request) -> Tenant:
    """The tenant `tenant_guard` resolved ("default" on a route without it)."""
    tenant: Tenant = getattr(request.state, "tenant", _DEFAULT)
    return tenant


def _unknown_message(tenant_header: str | None) -> str:
    if tenant_header is not None:
        return f"the {tenant_header} header names no tenant of this server"
    return "missing or invalid API key: send `Authorization: Bearer <key>` with a tenant's key"
