"""TenantAdmission: one request's hold on its tenant's quota, from admission to its end
(docs/server.md, "Tenants, priorities and quotas").

    admit_tenant(...)   once the request's prompts are tokenized and checked, before they are
                        queued: the tenant's TenantQuota admits the request's prompt tokens, or
                        refuses it with a 429 in OpenAI's shape (the refusal's code, Retry-After
                        and x-ratelimit-* headers)
    finish(tokens)      when the request ends, however it ends (answered, aborted, its client
                        gone, failed): the completion tokens it generated are counted and its
                        concurrency given back, once
    headers()           the tenant's x-ratelimit-* headers, for the answer

A request counts once against requests_per_minute and max_concurrency whatever its prompts and
`n`; its prompt tokens are each prompt's once (as `usage.prompt_tokens` counts them, whatever
`n`), its completion tokens every choice's, so the counts equal the answers' `usage`. A
continuation's tokens generated elsewhere count where they were generated.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.server.tenancy.tenant_metrics import TenantMetrics
from pagedock.http.errors import APIError
from pagedock.tenancy.quota import QuotaExceeded
from pagedock.tenancy.quota_store import Lease, QuotaStore, QuotaStoreUnavailable
from pagedock.tenancy.tenants import Tenant


@dataclass
class TenantAdmission:
    tenant: str
    lease: Lease
    metrics: TenantMetrics

    def headers(self, now: float | None = None) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers for the limits the tenant has (none: empty)."""
        return self.lease.headers(now)

    def finish(self, completion_tokens: int, now: float | None = None) -> None:
        """Count the completion tokens and give back the concurrency (once)."""
        if self.lease.finished:
            return
        self.lease.finish(completion_tokens, now)
        self.metrics.observe_generated(self.tenant, completion_tokens)


async def admit_tenant(
    quotas: QuotaStore,
    metrics: TenantMetrics,
    tenant: Tenant,
    priority: int,
    prompt_tokens: int,
    now: float | None = None,
) -> TenantAdmission:
    """The request's admission, or the 429 its tenant's quota answers (counted by reason); a 503
    when the shared quota store does not answer."""
    try:
        lease = await quotas.admit(tenant, prompt_tokens, now)
    except QuotaStoreUnavailable as e:
        metrics.observe_rejected(tenant.name, "quota_store_unavailable")
        raise APIError(
            503, str(e), code="quota_store_unavailable", headers={"Retry-After": "1"}
        ) from e
    except QuotaExceeded as e:
        refusal = e.refusal
        metrics.observe_rejected(tenant.name, refusal.code)
        raise APIError(
            refusal.status, refusal.message, code=refusal.code, headers=refusal.headers
        ) from e
    metrics.observe_admitted(tenant.name, priority, prompt_tokens)
    return TenantAdmission(tenant.name, lease, metrics)
