"""`spec.tenancy`: who shares the deployment (tenants, found by API key or a gateway's header),
how urgent their work is (priority classes, vLLM's `priority`: lower runs first), what each may
use (quotas) and how a busy fleet is shared between them (fairness).

The operator renders it into the tenants file the router reads (or the engines, without a
router): llm_operator.builders.tenancy, format in pagedock/tenancy/tenants.py. API keys stay in
their Secrets: the pods mount them, the operator never reads them.
"""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from llm_operator.api.types import SpecModel
from pagedock.tenancy.tenants import DEFAULT_TENANT_NAME

# NOTE: a label value (metrics label, and a directory under the pods' keys folder), within the
# tenants file's own pattern (pagedock.tenancy.tenants.TENANT_NAME_PATTERN).
TENANT_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
HEADER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]*$"
MAX_TENANTS = 256
MAX_PRIORITY_CLASSES = 64
MAX_KEYS_PER_TENANT = 16
# Bounds keep the CEL rules' estimated cost within what the API server accepts.
Priority = Annotated[int | str | None, Field(json_schema_extra={"maxLength": 63})]


def _names_a_class(value: str) -> str:
    """CEL: `value` (an int-or-string field) is unset, an integer, or a class of priorityClasses."""
    return (
        f"!has({value}) || type({value}) != string || "
        f"has(self.priorityClasses) && {value} in self.priorityClasses"
    )


_UNKNOWN_CLASS_MESSAGE = (
    f"self.tenants.map(t, !({_names_a_class('t.priority')}), "
    "'tenant ' + t.name + ': priority ' + string(t.priority))[0] + ' is not in priorityClasses'"
)
CEL_RULES: Any = [
    {
        "rule": "self.quotaStore != 'redis' || has(self.quotaRedisURLSecret)",
        "message": "tenancy.quotaStore redis needs tenancy.quotaRedisURLSecret (the Secret "
        "holding the URL)",
    },
    {
        "rule": "self.quotaStore == 'redis' || !has(self.quotaRedisURLSecret)",
        "message": "tenancy.quotaRedisURLSecret is for tenancy.quotaStore redis",
    },
    {
        "rule": f"self.tenants.all(t, {_names_a_class('t.priority')})",
        "message": "a tenant's priority names no class of priorityClasses",
        "messageExpression": _UNKNOWN_CLASS_MESSAGE,
    },
    {
        "rule": _names_a_class("self.defaultPriority"),
        "message": "defaultPriority names no class of priorityClasses",
        "messageExpression": "'defaultPriority ' + string(self.defaultPriority) + "
        "' is not in priorityClasses'",
    },
    {
        "rule": f"self.tenants.all(t, t.name != '{DEFAULT_TENANT_NAME}')",
        "message": f"the tenant name {DEFAULT_TENANT_NAME} is reserved (the router's own "
        "--api-key holders): name the tenant otherwise",
    },
    {
        "rule": "has(self.tenantHeader) || "
        "self.tenants.all(t, has(t.apiKeySecrets) && size(t.apiKeySecrets) > 0)",
        "message": "every tenant needs apiKeySecrets unless tenantHeader names the tenants",
    },
]


class TenantKeySecret(SpecModel):
    name: str = Field(max_length=253, pattern=SECRET_NAME_PATTERN)
    """The Secret's name (same namespace); the pods that read the tenants mount it."""
    key: str = Field("api-key", max_length=253, pattern=SECRET_KEY_PATTERN)
    """The key inside the Secret whose value is one API key."""


class RedisURLSecret(SpecModel):
    name: str = Field(max_length=253, pattern=SECRET_NAME_PATTERN)
    """The Secret's name (same namespace)."""
    key: str = Field("url", max_length=253, pattern=SECRET_KEY_PATTERN)
    """The key inside the Secret whose value is the URL: redis://[:password@]host:port/db,
    rediss:// for TLS."""


def check_redis_secret(
    store: str, secret: RedisURLSecret | None, store_field: str, secret_field: str
) -> None:
    """A store and its Secret agree: redis needs the Secret, memory takes none."""
    if store == "redis" and secret is None:
        raise ValueError(
            f"{store_field} redis needs {secret_field} (the Secret holding the redis:// URL)"
        )
    if store == "memory" and secret is not None:
        raise ValueError(f"{secret_field} is for {store_field} redis")


class TenantSpec(SpecModel):
    name: str = Field(max_length=63, pattern=TENANT_NAME_PATTERN)
    """The tenant's name (a label value: metrics and logs carry it; a gateway's tenantHeader
    sends it)."""
    api_key_secrets: list[TenantKeySecret] = Field(
        default_factory=list, max_length=MAX_KEYS_PER_TENANT
    )
    """The tenant's API keys (`Authorization: Bearer KEY`), each a key of a Secret; one key
    names one tenant."""
    priority: Priority = None
    """The most urgent vLLM priority its requests may run at (lower runs first): an integer or a
    class of priorityClasses; defaultPriority when unset."""
    requests_per_minute: int | None = Field(None, ge=1)
    """Requests a minute (a continuously refilled bucket); past it, 429 with Retry-After."""
    tokens_per_minute: int | None = Field(None, ge=1)
    """Prompt and completion tokens a minute, counted as served; past it, 429 with Retry-After."""
    max_concurrency: int | None = Field(None, ge=1)
    """Requests of this tenant under way at once (queued in the router included)."""


class TenancySpec(SpecModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": CEL_RULES})

    priority_classes: dict[str, int] = Field(default_factory=dict, max_length=MAX_PRIORITY_CLASSES)
    """Names for vLLM priorities (lower runs first), e.g. `interactive: 0`, `batch: 10`."""
    default_priority: Priority = None
    """The priority of tenants that name none: an integer or a class; 0 when unset."""
    fairness: Literal["vtc", "fcfs"] = "vtc"
    """How waiting requests of one priority are shared between tenants: vtc, the tenant served
    the fewest tokens goes next (virtual token counters); fcfs, arrival order (`--fairness`)."""
    tenant_header: str | None = Field(None, max_length=128, pattern=HEADER_NAME_PATTERN)
    """A header naming the request's tenant, set by a trusted gateway in front that
    authenticated the client (`--tenant-header`); only where clients cannot reach the endpoint
    without that gateway. Unset: the tenant is the one whose API key the request presents."""
    tenants: list[TenantSpec] = Field(
        min_length=1,
        max_length=MAX_TENANTS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """The tenants (at least one); a request with an API key none of them holds is refused 401."""
    quota_store: Literal["memory", "redis"] = "memory"
    """Where the tenants' quotas are counted: memory, each router (or engine, without a router)
    its own, so with two routers a tenant may get up to twice its limits; redis, one Redis they
    all share (named by quotaRedisURLSecret), so the limits hold across them."""
    quota_redis_url_secret: RedisURLSecret | None = Field(None, alias="quotaRedisURLSecret")
    """With quotaStore redis: the Secret holding the Redis URL (`PAGEDOCK_QUOTA_STORE` in the
    pods that count quotas; never in the pod template nor on a command line)."""

    @model_validator(mode="after")
    def _redis_needs_its_secret(self) -> "TenancySpec":
        check_redis_secret(
            self.quota_store,
            self.quota_redis_url_secret,
            "tenancy.quotaStore",
            "tenancy.quotaRedisURLSecret",
        )
        return self

    @model_validator(mode="after")
    def _unique_tenant_names(self) -> "TenancySpec":
        names = [tenant.name for tenant in self.tenants]
        if DEFAULT_TENANT_NAME in names:
            raise ValueError(f"tenancy.tenants: the name {DEFAULT_TENANT_NAME} is reserved")
        duplicate = next((name for name in names if names.count(name) > 1), None)
        if duplicate is not None:
            raise ValueError(f"tenancy.tenants: the name {duplicate} is declared twice")
        return self

    @model_validator(mode="after")
    def _priorities_name_known_classes(self) -> "TenancySpec":
        known = ", ".join(sorted(self.priority_classes)) or "none are declared"
        if self._unknown(self.default_priority):
            raise ValueError(
                f"tenancy.defaultPriority {self.default_priority!r} is not in "
                f"tenancy.priorityClasses ({known})"
            )
        for tenant in self.tenants:
            if self._unknown(tenant.priority):
                raise ValueError(
                    f"tenancy.tenants {tenant.name}: priority {tenant.priority!r} is not in "
                    f"tenancy.priorityClasses ({known})"
                )
        return self

    @model_validator(mode="after")
    def _keys_reach_every_tenant(self) -> "TenancySpec":
        if self.tenant_header is None:
            keyless = [tenant.name for tenant in self.tenants if not tenant.api_key_secrets]
            if keyless:
                raise ValueError(
                    f"tenancy.tenants {keyless[0]}: no apiKeySecrets, and no tenantHeader "
                    "names tenants: no request could reach it"
                )
        return self

    @model_validator(mode="after")
    def _one_tenant_per_key(self) -> "TenancySpec":
        owners: dict[tuple[str, str], str] = {}
        for tenant in self.tenants:
            for secret in tenant.api_key_secrets:
                ref = (secret.name, secret.key)
                if ref in owners:
                    raise ValueError(
                        f"tenancy.tenants: the API key in Secret {secret.name} (key {secret.key}) "
                        f"is listed twice (tenants {owners[ref]} and {tenant.name}): "
                        "each key names one tenant"
                    )
                owners[ref] = tenant.name
        return self

    def _unknown(self, priority: int | str | None) -> bool:
        return isinstance(priority, str) and priority not in self.priority_classes
