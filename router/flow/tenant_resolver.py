"""TenantResolver: the tenant a request belongs to.

    no --tenants                   one tenant, "default" (the API-key guard, if any, already ran)
    --tenants                      the tenant whose key the request presents
    --tenants --tenant-header H    the tenant header H names (a gateway in front authenticated
                                   the client and says who it is)
    --api-key as well              its holders are the tenant "default" (no limits, priority 0):
                                   the operator's own key keeps working beside the tenants'

Anything else is a 401 in OpenAI's shape, as a wrong API key is.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from pagedock.http.auth import bearer_key, check_api_key
from pagedock.http.errors import APIError
from pagedock.tenancy.tenants import DEFAULT_TENANT_NAME, Tenant, TenantTable, load_tenants
from router.config import RouterConfig

DEFAULT_TENANT = Tenant(DEFAULT_TENANT_NAME)


class TenantResolver:
    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.table: TenantTable | None = load_tenants(config.tenants) if config.tenants else None

    def known_priorities(self) -> set[int]:
        """The priorities the tenants run at by default (metric labels name only these)."""
        tenants = self.table.tenants.values() if self.table else ()
        return {0, *(t.priority for t in tenants)}

    def resolve(self, headers: Headers) -> Tenant:
        """The request's tenant, or the 401."""
        if self.table is None:
            check_api_key(self.config.api_key, bearer_key(headers))
            return DEFAULT_TENANT
        key = bearer_key(headers)
        api_key = self.config.api_key
        if api_key and key and hmac.compare_digest(key.encode(), api_key.encode()):
            return DEFAULT_TENANT
        if self.config.tenant_header is not None:
            tenant = self.table.by_name(headers.get(self.config.tenant_header))
        else:
            tenant = self.table.by_key(key)
        if tenant is None:
            raise APIError(
                401,
                _unknown_message(self.config.tenant_header),
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return tenant


def _unknown_message(tenant_header: str | None) -> str:
    if tenant_header is not None:
        return f"the {tenant_header} header names no tenant of this deployment"
    return "missing or invalid API key: send `Authorization: Bearer <key>` with a tenant's key"
