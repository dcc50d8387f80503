"""TenancyConfig: tenants, their quotas and fair sharing (docs/server.md, "Tenants, priorities and
quotas"; the file: docs/tenants.md), a base of EngineConfig (engine/config.py), so each field is a
`pagedock serve` flag and a `PAGEDOCK_*` variable."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagedock.errors import ConfigError
from pagedock.options import option_meta
from pagedock.tenancy.tenants import TenantTable, load_tenants

FAIRNESS = ("vtc", "fcfs")


@dataclass
class TenancyConfig:
    tenants: str | None = field(default=None, metadata=option_meta(metavar="FILE"))
    """The tenants file (YAML or JSON: names, API keys or key files, priorities, quotas;
    docs/tenants.md). With it, the server's client routes need a listed tenant's key (else 401),
    its quotas are checked (429) and its priority bounds its requests'. Read at start."""
    tenant_header: str | None = field(default=None, metadata=option_meta(metavar="NAME"))
    """Read the tenant's name from this header (set by a gateway that authenticated the client)
    instead of from the bearer key; needs --tenants."""
    fairness: str = field(default="vtc", metadata=option_meta(metavar="{vtc,fcfs}"))
    """The waiting queue between tenants: vtc (within a priority, the tenant whose requests were
    computed the fewest tokens goes first: virtual token counters), or fcfs (arrival order)."""
    interrupt_steps: bool = True
    """Cut a step that prefills other tenants' prompts short, between two layers, when a light
    tenant's request arrives (with --scheduling-policy priority, also a more urgent one), so its
    prompt runs next beside the running decodes; off: it waits for the step in progress. Never
    under tensor parallelism (docs/tenants.md)."""

    def _check_tenancy(self) -> None:
        if self.fairness not in FAIRNESS:
            raise ConfigError(f"fairness must be vtc or fcfs, got {self.fairness!r}")
        if self.tenant_header is not None and self.tenants is None:
            raise ConfigError("--tenant-header needs --tenants (the names it may carry)")
        if self.tenant_header is not None and not self.tenant_header.strip():
            raise ConfigError("--tenant-header is empty: name a header, or leave it unset")
        self.tenant_table()  # a bad file stops the start here, before the model loads

    def tenant_table(self) -> TenantTable | None:
        """The tenants file, read now (its key files too); None without one. ConfigError naming
        the file and the problem."""
        return None if self.tenants is None else load_tenants(self.tenants)
