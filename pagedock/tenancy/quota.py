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

All of it runs on one event loop (the router's, the server's): no locks.
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
        headers = {}
        for kind, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is None:
                continue
            headers[f"x-ratelimit-limit-{kind}"] = str(bucket.limit_per_minute)
            remaining = max(0, math.floor(bucket.available(now)))
            headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
            headers[f"x-ratelimit-reset-{kind}"] = reset_duration(bucket.seconds_until_full(now))
        return headers

    def _check(self, prompt_tokens: int, now: float) -> None:
        t = self.tenant
        if t.max_concurrency is not None and self.in_flight >= t.max_concurrency:
            self._refuse(
                "concurrency_limit_exceeded",
                f"tenant {t.name!r} has {self.in_flight} requests under way, its limit "
                f"(max_concurrency {t.max_concurrency})",
                1.0,
                now,
            )
        if self.requests is not None and self.requests.available(now) < 1:
            self._refuse(
                "requests_per_minute_exceeded",
                f"tenant {t.name!r} is over its {t.requests_per_minute} requests per minute",
                self.requests.seconds_until(1, now),
                now,
            )
        if self.tokens is not None:
            self._check_tokens(self.tokens, prompt_tokens, now)

    def _check_tokens(self, bucket: RateBucket, prompt_tokens: int, now: float) -> None:
        limit = bucket.limit_per_minute
        if prompt_tokens > limit:
            message = (
                f"the request's {prompt_tokens} prompt tokens are more than tenant "
                f"{self.tenant.name!r} may use in a minute ({limit} tokens per minute)"
            )
            headers = {**self.headers(now), "x-should-retry": "false"}
            raise QuotaExceeded(Refusal(429, "request_too_large", message, headers))
        needed = max(1, prompt_tokens)
        if bucket.available(now) < needed:
            self._refuse(
                "tokens_per_minute_exceeded",
                f"tenant {self.tenant.name!r} is over its {limit} tokens per minute "
                f"({math.floor(bucket.available(now))} left; this prompt needs {prompt_tokens})",
                bucket.seconds_until(needed, now),
                now,
            )

    def _refuse(self, code: str, message: str, retry_after_s: float, now: float) -> None:
        headers = {**self.headers(now), "retry-after": str(max(1, math.ceil(retry_after_s)))}
        raise QuotaExceeded(Refusal(429, code, message, headers))


@dataclass
class QuotaLease:
    """One admitted request's hold on its tenant's quota: count its tokens as they are served,
    then finish it (once; later calls do nothing)."""

    quota: TenantQuota
    tokens: int = 0
    finished: bool = False

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
