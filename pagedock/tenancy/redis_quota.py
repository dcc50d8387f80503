"""RedisQuotaStore: tenants' quotas counted in one Redis that a fleet's routers (or engines) share
(`--quota-store redis://...`), so a tenant's limits hold across all of them.

Per tenant, under `pagedock:quota:<tenant>:`:

    requests, tokens    a bucket each (a hash: `level`, `at`), refilled continuously at limit / 60
                        a second, as RateBucket (rate_bucket.py) does in one process; a bucket that
                        would be full again expires
    leases              a sorted set: one member per request under way, scored by when it expires;
                        its size is the tenant's concurrency

Admission is one Lua script (atomic in Redis: the counts are exact however many servers admit at
once) timed by Redis's own clock, so the servers' clocks never meet. A request's lease is renewed
every LEASE_TTL_S / 3 while it runs and removed when it ends, with its completion tokens taken
from the tokens bucket; the leases of a server that died expire within LEASE_TTL_S.

A store that does not answer within SOCKET_TIMEOUT_S refuses the request
(QuotaStoreUnavailable, a 503): a tenant's limits are not waived while Redis is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pagedock.tenancy.quota import (
    over_concurrency,
    over_requests,
    over_tokens,
    ratelimit_headers,
    too_large,
)
from pagedock.tenancy.quota_store import Lease, QuotaStore, QuotaStoreUnavailable
from pagedock.tenancy.tenants import Tenant

logger = logging.getLogger("pagedock.quota")

KEY_PREFIX = "pagedock:quota:"
LEASE_TTL_S = 30.0
SOCKET_TIMEOUT_S = 2.0

# KEYS: requests bucket, tokens bucket, leases. ARGV: requests_per_minute, tokens_per_minute,
# max_concurrency (0: no such limit), prompt tokens, lease id, lease TTL (s).
# Returns: verdict, seconds to wait, requests level, tokens level, requests under way.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prompt, ttl = tonumber(ARGV[4]), tonumber(ARGV[6])
local function level(key, limit)
  if limit <= 0 then return 0 end
  local v = redis.call('HMGET', key, 'level', 'at')
  if not v[1] then return limit end
  return math.min(limit, tonumber(v[1]) + (now - tonumber(v[2])) * limit / 60)
end
local function store(key, limit, lvl)
  redis.call('HSET', key, 'level', tostring(lvl), 'at', tostring(now))
  redis.call('EXPIRE', key, math.ceil((limit - lvl) * 60 / limit) + 1)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local busy = redis.call('ZCARD', KEYS[3])
local req, tok = level(KEYS[1], rpm), level(KEYS[2], tpm)
local need = math.max(1, prompt)
local verdict, wait = 'ok', 0
if maxc > 0 and busy >= maxc then verdict, wait = 'concurrency', 1
elseif rpm > 0 and req < 1 then verdict, wait = 'requests', (1 - req) * 60 / rpm
elseif tpm > 0 and prompt > tpm then verdict = 'too_large'
elseif tpm > 0 and tok < need then verdict, wait = 'tokens', (need - tok) * 60 / tpm
end
if verdict == 'ok' then
  if rpm > 0 then req = req - 1; store(KEYS[1], rpm, req) end
  if tpm > 0 then tok = tok - prompt; store(KEYS[2], tpm, tok) end
  if maxc > 0 then
    redis.call('ZADD', KEYS[3], now + ttl, ARGV[5])
    redis.call('EXPIRE', KEYS[3], math.ceil(ttl) + 1)
    busy = busy + 1
  end
end
return {verdict, tostring(wait), tostring(req), tostring(tok), busy}
"""

# KEYS: tokens bucket, leases. ARGV: tokens_per_minute (0: none), completion tokens, lease id.
_FINISH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local tpm, used = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[3])
if tpm > 0 and used > 0 then
  local v = redis.call('HMGET', KEYS[1], 'level', 'at')
  local lvl = tpm
  if v[1] then lvl = math.min(tpm, tonumber(v[1]) + (now - tonumber(v[2])) * tpm / 60) end
  lvl = lvl - used
  redis.call('HSET', KEYS[1], 'level', tostring(lvl), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[1], math.ceil((tpm - lvl) * 60 / tpm) + 1)
end
return 1
"""

# KEYS: leases. ARGV: lease TTL (s), then the lease ids still under way.
_RENEW = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[i]) end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1])) + 1)
return 1
"""


def quota_keys(tenant: str) -> tuple[str, str, str]:
    """The requests bucket, the tokens bucket and the leases of a tenant (names hold no ':')."""
    base = f"{KEY_PREFIX}{tenant}:"
    return base + "requests", base + "tokens", base + "leases"


@dataclass
class RedisLease:
    store: RedisQuotaStore
    tenant: Tenant
    lease_id: str
    counted_headers: dict[str, str]
    """The x-ratelimit-* headers as admission left the tenant's buckets."""
    finished: bool = False

    def headers(self, now: float | None = None) -> dict[str, str]:
        return self.counted_headers

    def finish(self, completion_tokens: int = 0, now: float | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        self.store.end(self, completion_tokens)


class RedisQuotaStore(QuotaStore):
    def __init__(self, url: str, lease_ttl_s: float = LEASE_TTL_S) -> None:
        import redis.asyncio as redis_asyncio

        self.url = url
        self.where = _redacted(url)
        """The URL without its password, for the logs."""
        self.lease_ttl_s = lease_ttl_s
        self._redis: Any = redis_asyncio.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self._admit = self._redis.register_script(_ADMIT)
        self._finish = self._redis.register_script(_FINISH)
        self._renew = self._redis.register_script(_RENEW)
        self._live: dict[str, RedisLease] = {}
        """Leases under way (with a concurrency limit), renewed while they run."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._renewer: asyncio.Task[None] | None = None

    async def admit(self, tenant: Tenant, prompt_tokens: int, now: float | None = None) -> Lease:
        lease_id = uuid.uuid4().hex
        args: list[int | float | str] = [
            tenant.requests_per_minute or 0,
            tenant.tokens_per_minute or 0,
            tenant.max_concurrency or 0,
            prompt_tokens,
            lease_id,
            self.lease_ttl_s,
        ]
        try:
            raw = await self._admit(keys=quota_keys(tenant.name), args=args)
        except Exception as e:  # redis-py's ConnectionError, TimeoutError, ResponseError
            logger.warning("quota store %s did not answer: %s", self.where, e)
            raise QuotaStoreUnavailable(f"the quota store did not answer ({e})") from e
        verdict, wait_s, requests, tokens, busy = _decoded(raw)
        headers = ratelimit_headers(_levels(tenant, requests, tokens))
        if verdict == "concurrency":
            raise over_concurrency(tenant, busy, headers)
        if verdict == "requests":
            raise over_requests(tenant, wait_s, headers)
        if verdict == "too_large":
            raise too_large(tenant, prompt_tokens, headers)
        if verdict == "tokens":
            raise over_tokens(tenant, tokens, prompt_tokens, wait_s, headers)
        lease = RedisLease(self, tenant, lease_id, headers)
        if tenant.max_concurrency is not None:
            self._live[lease_id] = lease
            self._start_renewing()
        return lease

    def end(self, lease: RedisLease, completion_tokens: int) -> None:
        """The lease's request ended: its completion tokens and concurrency, in the background."""
        self._live.pop(lease.lease_id, None)
        keys = quota_keys(lease.tenant.name)
        args = [lease.tenant.tokens_per_minute or 0, max(0, completion_tokens), lease.lease_id]
        task = asyncio.get_running_loop().create_task(self._ended(keys[1:], args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ended(self, keys: tuple[str, ...], args: list[Any]) -> None:
        try:
            await self._finish(keys=keys, args=args)
        except Exception as e:  # the lease then expires; the tokens go uncounted
            logger.warning("quota store %s: a request's end was not counted: %s", self.where, e)

    def _start_renewing(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        while self._live:
            await asyncio.sleep(self.lease_ttl_s / 3)  # a period, not a synchronisation
            by_tenant: dict[str, list[str]] = {}
            for lease in list(self._live.values()):
                by_tenant.setdefault(lease.tenant.name, []).append(lease.lease_id)
            for tenant, ids in by_tenant.items():
                try:
                    await self._renew(keys=[quota_keys(tenant)[2]], args=[self.lease_ttl_s, *ids])
                except Exception as e:
                    logger.warning("quota store %s: leases not renewed: %s", self.where, e)

    async def close(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._redis.aclose()


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=f"***@{parts.hostname}:{parts.port or 6379}").geturl()


def _decoded(raw: list[Any]) -> tuple[str, float, float, float, int]:
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    verdict, wait_s, requests, tokens, busy = raw
    return text(verdict), float(text(wait_s)), float(text(requests)), float(text(tokens)), int(busy)


def _levels(tenant: Tenant, requests: float, tokens: float) -> list[tuple[str, int, float]]:
    levels = []
    if tenant.requests_per_minute is not None:
        levels.append(("requests", tenant.requests_per_minute, requests))
    if tenant.tokens_per_minute is not None:
        levels.append(("tokens", tenant.tokens_per_minute, tokens))
    return levels
