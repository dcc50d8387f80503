"""RedisResponsesStore: stored responses in Redis (redis-py's asyncio client), shared by every
engine of a fleet, so a follow-up rebuilds its conversation on whichever replica it lands.

One string key per response, `pagedock:response:<tenant>:<id>`, holding StoredResponse's JSON, set
with an expiry when `ttl_s` > 0. Tenant names cannot hold ':' (pagedock/tenancy/tenants.py) and
ids are bounded, so one tenant's key is never another's.
"""

from __future__ import annotations

from typing import Any

from pagedock.responses_store.store import ResponsesStore, ResponsesStoreError
from pagedock.responses_store.stored_response import StoredResponse

KEY_PREFIX = "pagedock:response:"
# Seconds to connect and to wait for an answer: a store that does not answer is a 503 soon.
SOCKET_TIMEOUT_S = 5.0


def response_key(tenant: str, response_id: str) -> str:
    return f"{KEY_PREFIX}{tenant}:{response_id}"


class RedisResponsesStore(ResponsesStore):
    def __init__(self, url: str, ttl_s: int = 0) -> None:
        import redis.asyncio as redis_asyncio

        self.url = url
        self.ttl_s = ttl_s
        self._redis: Any = redis_asyncio.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )

    async def put(self, record: StoredResponse) -> None:
        key = response_key(record.tenant, record.id)
        await self._call(self._redis.set, key, record.to_json(), ex=self.ttl_s or None)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        raw = await self._call(self._redis.get, response_key(tenant, response_id))
        return None if raw is None else StoredResponse.from_json(raw)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return bool(await self._call(self._redis.delete, response_key(tenant, response_id)))

    async def close(self) -> None:
        await self._redis.aclose()

    async def _call(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        from redis.exceptions import RedisError

        try:
            return await command(*args, **kwargs)
        except (RedisError, OSError) as e:
            raise ResponsesStoreError(
                f"the responses store ({_without_password(self.url)}) did not answer: {e}"
            ) from e


def _without_password(url: str) -> str:
    """The URL as logs and errors may show it: a password in it replaced by ***."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
