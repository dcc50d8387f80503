"""Flow control: who a request belongs to (tenant_resolver.py), what it may use (quotas, from
pagedock/tenancy/), and when it goes (flow_controller.py: priority bands, fair shares)."""
