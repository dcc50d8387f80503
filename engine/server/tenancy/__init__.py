"""Tenants on the engine's server (docs/server.md, "Tenants, priorities and quotas"): who a request
belongs to, its admission against its tenant's quotas, and the per-tenant metrics."""
