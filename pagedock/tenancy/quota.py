"""Quotas: a tenant's requests and tokens per minute and its concurrency, checked at admission,
with the answers OpenAI's clients already handle.

    over max_concurrency           429 concurrency_limit_exceeded, Retry-After: 1
    over requests_per_minute       429 requests_per_minute_exceeded, Retry-After: when 1 is back
    over tokens_per_minute         429 tokens_per_minute_exceeded, Retry-After: when the prompt's
                                   tokens are back
    a prompt over the whole tokens_per_minute
                                   429 request_too_large, x-should-retry: false (never fits)

Every answer, admitted or refused, carries OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,
tokens} headers for the limits the tenant has. Tokens are counted as served: the prompt's at
admission, the completion's when the request ends (QuotaLease.finish), so the count is exact; a
tenant whose completions overdraw the bucket waits until the refill pays the debt.

Here, each process's own counts (MemoryQuotaStore in quota_store.py); one Redis a fleet's routers
or engines share keeps the same counts in pagedock/tenancy/redis_quota.py. All of it runs on one
event loop (the router's, the server's): no locks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from pagedock.tenancy.rate_bucket import RateBucket, reset_duration
from pagedock.tenancy.tenants import Tenant


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: an HTTP status, an error code and the headers to answer with."""

    status: int
    code: str
    message: str
    headers: dict[str, str]


class QuotaExceeded(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass
class TenantQuota:
    """One tenant's live counts against its limits."""

    tenant: Tenant
    requests: RateBucket | None = field(init=False)
    tokens: RateBucket | None = field(init=False)
    in_flight: int = 0
    tokens_served: int = 0
    """Prompt and completion tokens counted since start (exact: what leases reported)."""

    def __post_init__(self) -> None:
        t = self.tenant
        self.requests = None if t.requests_per_minute is None else RateBucket(t.requests_per_minute)
        self.tokens = None if t.tokens_per_minute is None else RateBucket(t.tokens_per_minute)

    def admit(self, prompt_tokens: int, now: float | None = None) -> QuotaLease:
        """A lease for one request of `prompt_tokens`, or QuotaExceeded naming the limit."""
        now = time.monotonic() if now is None else now
        self._check(prompt_tokens, now)
        if self.requests is not None:
            self.requests.take(1, now)
        self.in_flight += 1
        lease = QuotaLease(self)
        lease.count(prompt_tokens, now)
        return lease

    def headers(self, now: float | None = None) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers for the limits this tenant has."""
        now = time.monotonic() if now is None else now
        levels = []
        for kind, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is not None:
                levels.append((kind, bucket.limit_per_minute, bucket.available(now)))
        return ratelimit_headers(levels)

    def _check(self, prompt_tokens: int, now: float) -> None:
        t = self.tenant
        if t.max_concurrency is not None and self.in_flight >= t.max_concurrency:
            raise over_concurrency(t, self.in_flight, self.headers(now))
        if self.requests is not None and self.requests.available(now) < 1:
            wait_s = self.requests.seconds_until(1, now)
            raise over_requests(t, wait_s, self.headers(now))
        tokens = self.tokens
        if tokens is not None:
            if prompt_tokens > tokens.limit_per_minute:
                raise too_large(t, prompt_tokens, self.headers(now))
            needed = max(1, prompt_tokens)
            if tokens.available(now) < needed:
                wait_s = tokens.seconds_until(needed, now)
                raise over_tokens(
                    t, tokens.available(now), prompt_tokens, wait_s, self.headers(now)
                )


# ---- the answers, whichever store counted ---------------------------------------------------


def ratelimit_headers(levels: list[tuple[str, int, float]]) -> dict[str, str]:
    """OpenAI's x-ratelimit-{limit,remaining,reset}-{kind} headers from each bucket's (kind,
    limit per minute, level now)."""
    headers = {}
    for kind, limit, level in levels:
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(level)))
        full_in_s = max(0.0, (limit - level) / (limit / 60.0))
        headers[f"x-ratelimit-reset-{kind}"] = reset_duration(full_in_s)
    return headers


def over_concurrency(t: Tenant, in_flight: int, headers: dict[str, str]) -> QuotaExceeded:
    message = (
        f"tenant {t.name!r} has {in_flight} requests under way, its limit "
        f"(max_concurrency {t.max_concurrency})"
    )
    return _refused("concurrency_limit_exceeded", message, 1.0, headers)


def over_requests(t: Tenant, wait_s: float, headers: dict[str, str]) -> QuotaExceeded:
    message = f"tenant {t.name!r} is over its {t.requests_per_minute} requests per minute"
    return _refused("requests_per_minute_exceeded", message, wait_s, headers)


def over_tokens(
    t: Tenant, available: float, prompt_tokens: int, wait_s: float, headers: dict[str, str]
) -> QuotaExceeded:
    message = (
        f"tenant {t.name!r} is over its {t.tokens_per_minute} tokens per minute "
        f"({math.floor(available)} left; this prompt needs {prompt_tokens})"
    )
    return _refused("tokens_per_minute_exceeded", message, wait_s, headers)


def too_large(t: Tenant, prompt_tokens: int, headers: dict[str, str]) -> QuotaExceeded:
    """A prompt over the whole tokens_per_minute: it never fits (x-should-retry: false)."""
    message = (
        f"the request's {prompt_tokens} prompt tokens are more than tenant {t.name!r} may use "
        f"in a minute ({t.tokens_per_minute} tokens per minute)"
    )
    headers = {**headers, "x-should-retry": "false"}
    return QuotaExceeded(Refusal(429, "request_too_large", message, headers))


def _refused(code: str, message: str, wait_s: float, headers: dict[str, str]) -> QuotaExceeded:
    headers = {**headers, "retry-after": str(max(1, math.ceil(wait_s)))}
    return QuotaExceeded(Refusal(429, code, message, headers))


@dataclass
class QuotaLease:
    """One admitted request's hold on its tenant's quota: count its tokens as they are served,
    then finish it (once; later calls do nothing)."""

    quota: TenantQuota
    tokens: int = 0
    finished: bool = False

    def headers(self, now: float | None = None) -> dict[str, str]:
        return self.quota.headers(now)

    def count(self, tokens: int, now: float | None = None) -> None:
        if tokens <= 0:
            return
        self.tokens += tokens
        self.quota.tokens_served += tokens
        if self.quota.tokens is not None:
            self.quota.tokens.take(tokens, time.monotonic() if now is None else now)

    def finish(self, completion_tokens: int = 0, now: float | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        self.count(completion_tokens, now)
        self.quota.in_flight -= 1


class QuotaBook:
    """Every tenant's TenantQuota, made when the tenant is first seen."""

    def __init__(self) -> None:
        self._quotas: dict[str, TenantQuota] = {}

    def of(self, tenant: Tenant) -> TenantQuota:
        quota = self._quotas.get(tenant.name)
        if quota is None or quota.tenant != tenant:  # a reloaded file may change the limits
            quota = self._quotas[tenant.name] = TenantQuota(tenant)
        return quota

    def __iter__(self) -> Iterator[TenantQuota]:
        return iter(self._quotas.values())
