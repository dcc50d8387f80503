"""QuotaStore: where a server's tenants' quotas are counted (`--quota-store memory|URL`).

    memory            this process's own counts (QuotaBook, quota.py): exact for everything this
                      router or engine admits, blind to its peers: with two routers a tenant may
                      get up to twice its limits
    redis://...       one Redis the fleet's routers (or engines) share (redis_quota.py): the same
                      counts, kept there, so the limits hold across all of them

Either way a request is admitted (a lease) or refused with the same 429s and x-ratelimit-*
headers (quota.py); its lease counts its completion tokens and gives back its concurrency when
it ends.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Protocol

from pagedock.errors import ConfigError
from pagedock.tenancy.quota import QuotaBook
from pagedock.tenancy.tenants import Tenant

MEMORY = "memory"


class QuotaStoreUnavailable(Exception):
    """The shared store did not answer: the request is refused (503) rather than let past its
    tenant's limits."""


class Lease(Protocol):
    """One admitted request's hold on its tenant's quota."""

    @property
    def finished(self) -> bool: ...

    def headers(self, now: float | None = None) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers for the limits the tenant has."""
        ...

    def finish(self, completion_tokens: int = 0, now: float | None = None) -> None:
        """Count the completion tokens and give back the concurrency (once)."""
        ...


class QuotaStore(ABC):
    @abstractmethod
    async def admit(self, tenant: Tenant, prompt_tokens: int, now: float | None = None) -> Lease:
        """A lease for one request of `prompt_tokens`, or QuotaExceeded naming the limit
        (QuotaStoreUnavailable when the store does not answer)."""

    async def close(self) -> None:  # noqa: B027 (nothing to let go of in memory)
        """Let go of the store (the leases still held are given back, or expire)."""


class MemoryQuotaStore(QuotaStore):
    def __init__(self) -> None:
        self.book = QuotaBook()

    async def admit(self, tenant: Tenant, prompt_tokens: int, now: float | None = None) -> Lease:
        return self.book.of(tenant).admit(prompt_tokens, time.monotonic() if now is None else now)


def check_quota_store_url(url: str) -> None:
    if url != MEMORY and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"--quota-store must be 'memory' or a redis://host:port/db URL (rediss:// for TLS), "
            f"got {url!r}"
        )


def open_quota_store(url: str) -> QuotaStore:
    """The store `--quota-store` names."""
    check_quota_store_url(url)
    if url == MEMORY:
        return MemoryQuotaStore()
    from pagedock.tenancy.redis_quota import RedisQuotaStore

    return RedisQuotaStore(url)
