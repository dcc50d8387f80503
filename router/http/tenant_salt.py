"""Tenant salting: every request the router forwards carries a `cache_salt` (vLLM's field) derived
from its tenant, so one tenant's prompts never share prefix-cache blocks with another's, and no
tenant can learn from cache hits (`usage.prompt_tokens_details.cached_tokens`, timings) what
another sent.

A tenant is the bearer key a client presents (`Authorization: Bearer KEY`; no header is one
anonymous tenant). Its tag is a digest of the key, never the key: the salt travels to the replicas
in the request body and in their vLLM-format KV events.

    client sends no cache_salt      forwarded: "tenant:<tag>"
    client sends cache_salt S       forwarded: "tenant:<tag>:<digest of S>"

A client's own salt is honoured (requests of one tenant with the same S share blocks, with
another S they do not), but always under its tenant: no salt a client picks can name another
tenant's chain. The engine checks the forwarded salt as it checks any (pagedock/limits.py's
MAX_CACHE_SALT_CHARS), and the forwarded one always fits.
"""

from __future__ import annotations

import hashlib
import json

from starlette.datastructures import Headers

from router.config import RouterConfig

_TENANT_DOMAIN = b"pagedock-tenant-v1\x00"
_CLIENT_SALT_DOMAIN = b"pagedock-client-salt-v1\x00"
TAG_HEX_CHARS = 32
"""128 bits of sha256: tags (and client salts' digests) never meet by chance."""


def salts_by_tenant(config: RouterConfig) -> bool:
    """--cache-salt-by-tenant, resolved: unset, on exactly when clients need a key."""
    if config.cache_salt_by_tenant is None:
        return config.api_key is not None or config.tenants is not None
    return config.cache_salt_by_tenant


def tenant_tag(headers: Headers, tenant_name: str | None = None) -> str:
    """The tenant of a request: a digest of its tenant's name when the router has a tenants file
    (all of a tenant's keys share its blocks), else of the credential its Authorization header
    carries."""
    if tenant_name is not None:
        key = f"name:{tenant_name}"
    else:
        value = headers.get("authorization", "")
        scheme, _, credential = value.partition(" ")
        key = credential.strip() if scheme.lower() == "bearer" else value
    digest = hashlib.sha256(_TENANT_DOMAIN + key.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:TAG_HEX_CHARS]


def forwarded_salt(tag: str, client_salt: str | None) -> str:
    """The cache_salt forwarded for a request of tenant `tag` that carried `client_salt`."""
    if client_salt is None:
        return f"tenant:{tag}"
    salt = client_salt.encode("utf-8", "surrogatepass")  # a lone surrogate is some salt too
    digest = hashlib.sha256(_CLIENT_SALT_DOMAIN + salt).hexdigest()
    return f"tenant:{tag}:{digest[:TAG_HEX_CHARS]}"


def with_cache_salt(body: bytes, salt: str) -> bytes:
    """The JSON object `body` with its `cache_salt` set to `salt` (any earlier one replaced).
    Only for a body the request's model parsed: it is a JSON object."""
    return with_fields(body, {"cache_salt": salt})


def with_fields(body: bytes, changes: dict[str, object]) -> bytes:
    """The JSON object `body` with `changes` set (a parsed body: it is a JSON object)."""
    fields = json.loads(body)
    fields.update(changes)
    try:  # UTF-8 as it came: \u escapes would make a long non-ASCII prompt up to twice as long
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate (a JSON escape) has no UTF-8: keep it escaped
        return json.dumps(fields, separators=(",", ":")).encode()
