"""The tenants file (`--tenants FILE`, YAML or JSON): who a request belongs to and what it may use.

    priority_classes:            # optional: names for vLLM priorities (lower runs first)
      interactive: 0
      batch: 10
    default_priority: batch      # optional: a class name or an integer (else 0)
    tenants:
      - name: chat
        api_keys: [sk-chat-1]                       # and/or files holding one key each
        api_key_files: [/etc/pagedock/tenants/chat/api-key]
        priority: interactive                       # the most urgent this tenant may ask for
        requests_per_minute: 600                    # every limit is optional
        tokens_per_minute: 200000
        max_concurrency: 16

A bare list of tenants is a file too. A request belongs to the tenant whose key it presents
(`Authorization: Bearer KEY`), or, when the server reads the tenant from a header (a gateway that
authenticated the client sets it), to the tenant that header names; anything else is a 401.

A request may carry vLLM's `priority`; it runs at that priority but never more urgently than its
tenant's (`Tenant.effective_priority`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pagedock.errors import ConfigError

TENANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
"""A tenant name is a metric label value and a log field: short, printable, no spaces."""
_KEY_DOMAIN = b"pagedock-tenant-key-v1\x00"
DEFAULT_TENANT_NAME = "default"
"""The tenant of requests a tenants file does not name: every request without --tenants, and the
--api-key holders beside one. Reserved: a file's tenant of that name would share its counters."""
TENANT_HEADER = "x-pagedock-tenant"
"""The tenant's name, as the router forwards it to the engines (trusted with the internal key)."""

PriorityValue = int | str


class _TenantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=TENANT_NAME_PATTERN)]
    api_keys: list[Annotated[str, Field(min_length=1)]] = []
    api_key_files: list[str] = []
    priority: PriorityValue | None = None
    requests_per_minute: Annotated[int, Field(gt=0)] | None = None
    tokens_per_minute: Annotated[int, Field(gt=0)] | None = None
    max_concurrency: Annotated[int, Field(gt=0)] | None = None

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name == DEFAULT_TENANT_NAME:
            raise ValueError(
                f"the tenant name {DEFAULT_TENANT_NAME!r} is reserved (the --api-key holders and "
                "requests without a tenants file): name the tenant otherwise"
            )
        return name


class _TenantsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priority_classes: dict[str, int] = {}
    default_priority: PriorityValue = 0
    tenants: list[_TenantEntry]

    @field_validator("tenants")
    @classmethod
    def _some_tenant(cls, tenants: list[_TenantEntry]) -> list[_TenantEntry]:
        if not tenants:
            raise ValueError("list at least one tenant")
        return tenants


@dataclass(frozen=True)
class Tenant:
    name: str
    priority: int = 0
    """The most urgent vLLM priority its requests may run at (lower runs first)."""
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    """Prompt and completion tokens, counted as they are served."""
    max_concurrency: int | None = None
    """Requests of this tenant under way at once (queued in the router included)."""

    def effective_priority(self, requested: int | None) -> int:
        """The priority a request that asked for `requested` (None: nothing) runs at."""
        return self.priority if requested is None else max(self.priority, requested)


class TenantTable:
    """The tenants of a file, found by key (a digest of it: the table keeps no key) or name."""

    def __init__(self, tenants: list[Tenant], keys: dict[str, list[str]]) -> None:
        self.tenants = {t.name: t for t in tenants}
        self._by_key: dict[bytes, Tenant] = {}
        for name, tenant_keys in keys.items():
            for key in tenant_keys:
                digest = _digest(key)
                other = self._by_key.get(digest)
                if other is not None:
                    raise ConfigError(
                        f"tenants {other.name!r} and {name!r} share an API key: "
                        "each key names one tenant"
                    )
                self._by_key[digest] = self.tenants[name]

    def by_key(self, api_key: str | None) -> Tenant | None:
        return None if api_key is None else self._by_key.get(_digest(api_key))

    def by_name(self, name: str | None) -> Tenant | None:
        return None if name is None else self.tenants.get(name)

    @property
    def num_keys(self) -> int:
        return len(self._by_key)


def load_tenants(path: str | Path) -> TenantTable:
    """The tenants file at `path`; a ConfigError naming the file and the problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the tenants file {path}: {e.strerror or e}") from e
    try:
        data = yaml.safe_load(text) if path.suffix != ".json" else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise ConfigError(f"the tenants file {path} is not valid YAML/JSON: {e}") from e
    return parse_tenants(data, source=str(path))


def parse_tenants(data: Any, source: str = "tenants") -> TenantTable:
    """A TenantTable from the file's parsed content."""
    if isinstance(data, list):
        data = {"tenants": data}
    try:
        parsed = _TenantsFile.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_first_error(e)}") from e
    names = [t.name for t in parsed.tenants]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"{source}: tenant {duplicate!r} is listed twice")
    default = _priority(parsed.default_priority, parsed.priority_classes, source, "default")
    tenants, keys = [], {}
    for entry in parsed.tenants:
        priority = default
        if entry.priority is not None:
            priority = _priority(entry.priority, parsed.priority_classes, source, entry.name)
        tenants.append(
            Tenant(
                entry.name,
                priority,
                entry.requests_per_minute,
                entry.tokens_per_minute,
                entry.max_concurrency,
            )
        )
        keys[entry.name] = [*entry.api_keys, *(_read_key(f, source) for f in entry.api_key_files)]
    return TenantTable(tenants, keys)


def _priority(value: PriorityValue, classes: dict[str, int], source: str, who: str) -> int:
    if isinstance(value, int):
        return value
    if value not in classes:
        known = ", ".join(sorted(classes)) or "none are defined"
        raise ConfigError(f"{source}: {who}'s priority {value!r} is not a priority class ({known})")
    return classes[value]


def _read_key(path: str, source: str) -> str:
    try:
        key = Path(path).read_text().strip()
    except OSError as e:
        raise ConfigError(f"{source}: cannot read the API key file {path}: {e.strerror}") from e
    if not key:
        raise ConfigError(f"{source}: the API key file {path} is empty")
    return key


def _digest(key: str) -> bytes:
    return hashlib.sha256(_KEY_DOMAIN + key.encode("utf-8", "surrogatepass")).digest()


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
