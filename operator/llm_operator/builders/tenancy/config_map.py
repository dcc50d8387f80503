"""The ConfigMap `<name>-tenants`: the tenants file rendered from spec.tenancy, each API key as
the file the readers' volume puts it at (llm_operator.builders.tenancy.pod)."""

from typing import Any

import yaml

from llm_operator.api.tenancy import TenancySpec, TenantSpec
from llm_operator.builders.common import Obj, metadata
from llm_operator.builders.context import BuildContext
from llm_operator.names import tenants_name

COMPONENT = "tenants"
TENANTS_DIR = "/etc/pagedock/tenants"
TENANTS_FILE = "tenants.yaml"
HEADER = "# Rendered by the pagedock operator from the LLMDeployment's spec.tenancy; do not edit.\n"


def key_path(tenant: str, index: int) -> str:
    """Where a tenant's index-th API key lies, relative to TENANTS_DIR."""
    return f"keys/{tenant}/{index}"


def tenants_file(tenancy: TenancySpec) -> dict[str, Any]:
    """The tenants file's content: the spec's fields under the file's names, keys as files."""
    content: dict[str, Any] = {}
    if tenancy.priority_classes:
        content["priority_classes"] = dict(tenancy.priority_classes)
    if tenancy.default_priority is not None:
        content["default_priority"] = tenancy.default_priority
    content["tenants"] = [_tenant_entry(tenant) for tenant in tenancy.tenants]
    return content


def _tenant_entry(tenant: TenantSpec) -> dict[str, Any]:
    files = [
        f"{TENANTS_DIR}/{key_path(tenant.name, index)}"
        for index in range(len(tenant.api_key_secrets))
    ]
    optional = {
        "api_key_files": files or None,
        "priority": tenant.priority,
        "requests_per_minute": tenant.requests_per_minute,
        "tokens_per_minute": tenant.tokens_per_minute,
        "max_concurrency": tenant.max_concurrency,
    }
    return {"name": tenant.name, **{k: v for k, v in optional.items() if v is not None}}


def build_tenants_config_map(ctx: BuildContext) -> Obj:
    tenancy = ctx.spec.tenancy
    data = {}
    if tenancy is not None:  # unset: built for its kind and name only (pruning)
        text = yaml.safe_dump(tenants_file(tenancy), sort_keys=False, width=100)
        data[TENANTS_FILE] = HEADER + text
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(ctx, tenants_name(ctx.name), COMPONENT),
        "data": data,
    }


def secret_sources(tenancy: TenancySpec) -> list[Obj]:
    """One projected source per Secret, in the order the spec first names them."""
    items: dict[str, list[Obj]] = {}
    for tenant in tenancy.tenants:
        for index, secret in enumerate(tenant.api_key_secrets):
            item = {"key": secret.key, "path": key_path(tenant.name, index)}
            items.setdefault(secret.name, []).append(item)
    return [{"secret": {"name": name, "items": listed}} for name, listed in items.items()]
