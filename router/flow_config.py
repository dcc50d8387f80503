"""FlowConfig: tenants and flow control (docs/tenants.md), a base of RouterConfig
(router/config.py), so each field is a `pagedock route` flag and a `PAGEDOCK_*` variable."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagedock.errors import ConfigError
from pagedock.options import option_meta
from pagedock.tenancy.quota_store import check_quota_store_url

FAIRNESS = ("vtc", "fcfs")


@dataclass
class FlowConfig:
    tenants: str | None = None
    """The tenants file (YAML or JSON: names, API keys or key files, priorities, quotas;
    docs/tenants.md). With it, a request needs a listed tenant's key (else 401)."""
    tenant_header: str | None = None
    """Read the tenant's name from this header (set by a gateway that authenticated the client)
    instead of from the bearer key; needs --tenants."""
    fairness: str = "vtc"
    """vtc: within a priority band, the tenant served the fewest tokens goes first (virtual token
    counters); fcfs: arrival order."""
    max_inflight_per_replica: int = 0
    """Requests under way per ready replica before new ones wait in the router's flow queues
    (priority bands, fair between tenants); 0 = none wait here (the engines' queues order them,
    by the same rules)."""
    flow_queue_size: int = 1024
    """Requests one priority band may hold waiting; past it, 429 fleet_saturated (the tenant
    with the most waiting gives up its newest, so a light tenant still gets in)."""
    flow_queue_ttl_s: float = 30.0
    """Seconds a request may wait in a flow queue before a 429 queue_timeout."""
    flow_starvation_s: float = 10.0
    """A band that has gone this long without a slot gets the next one, once, before higher
    bands (the bound on starvation)."""
    quota_store: str = field(default="memory", metadata=option_meta(metavar="memory|URL"))
    """Where tenants' quotas are counted: memory (this router's own counts) or a
    redis://host:port/db URL that every router of the fleet shares, so limits hold across them."""

    def _check_flow(self) -> None:
        if self.fairness not in FAIRNESS:
            raise ConfigError(f"fairness must be vtc or fcfs, got {self.fairness!r}")
        if self.tenant_header is not None and self.tenants is None:
            raise ConfigError("--tenant-header needs --tenants (the names it may carry)")
        if self.max_inflight_per_replica < 0:
            raise ConfigError(
                "max_inflight_per_replica must be 0 (no flow queue) or more, "
                f"got {self.max_inflight_per_replica}"
            )
        if self.flow_queue_size < 1:
            raise ConfigError(f"flow_queue_size must be 1 or more, got {self.flow_queue_size}")
        check_quota_store_url(self.quota_store)
        for name in ("flow_queue_ttl_s", "flow_starvation_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
