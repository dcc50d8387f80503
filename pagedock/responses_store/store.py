"""ResponsesStore: where `store: true` responses live, looked up by (tenant, id).

    memory                      this process only (the default): bounded by count, least recently
                                used first out
    redis://host:port/db        Redis, shared by every engine of a fleet (rediss:// for TLS,
    rediss://…, unix://…        unix:// for a socket): a follow-up may land on any replica

A stored response expires `ttl_s` seconds after it was stored (0: never; the memory store still
evicts by count).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from pagedock.errors import ConfigError, PagedockError
from pagedock.responses_store.stored_response import StoredResponse

MEMORY = "memory"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class ResponsesStoreError(PagedockError):
    """The store could not be reached or answered wrongly (Redis down, say): a 503, never a
    response that silently forgot its conversation."""


class ResponsesStore(ABC):
    @abstractmethod
    async def put(self, record: StoredResponse) -> None:
        """Store (or replace) `record` under (its tenant, its id)."""

    @abstractmethod
    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's response with this id; None when there is none (or another tenant's)."""

    @abstractmethod
    async def delete(self, tenant: str, response_id: str) -> bool:
        """Remove the tenant's response; whether there was one."""

    @abstractmethod
    async def close(self) -> None:
        """Release what the store holds (its connections); it is not used after."""


def check_store_url(url: str) -> None:
    """ConfigError unless `url` names a store this build knows."""
    if url != MEMORY and not url.startswith(REDIS_SCHEMES):
        raise ConfigError(
            f"--responses-store must be 'memory' or a redis://host:port/db URL (rediss://, "
            f"unix:// too), got {url!r}"
        )


def open_responses_store(url: str, ttl_s: int, max_entries: int) -> ResponsesStore:
    """The store `url` names (check_store_url's values); connections are made on first use."""
    check_store_url(url)
    if url == MEMORY:
        from pagedock.responses_store.memory_store import MemoryResponsesStore

        return MemoryResponsesStore(max_entries, ttl_s)
    from pagedock.responses_store.redis_store import RedisResponsesStore

    return RedisResponsesStore(url, ttl_s)
