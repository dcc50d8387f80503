from __future__ import annotations

import pytest

from pagedock.tenancy.quota import QuotaBook, QuotaExceeded, TenantQuota
from pagedock.tenancy.rate_bucket import RateBucket, reset_duration
from pagedock.tenancy.tenants import Tenant


def refused(quota: TenantQuota, prompt_tokens: int, now: float) -> QuotaExceeded:
    with pytest.raises(QuotaExceeded) as caught:
        quota.admit(prompt_tokens, now)
    return caught.value


def test_a_bucket_refills_continuously_and_may_go_into_debt() -> None:
    bucket = RateBucket(60)  # one a second
    bucket.take(70, now=0.0)
    assert bucket.available(0.0) == -10
    assert bucket.seconds_until(1, 0.0) == pytest.approx(11)
    assert bucket.available(30.0) == pytest.approx(20)
    assert bucket.available(1000.0) == 60  # never above a minute's worth
    assert bucket.seconds_until(600, 1000.0) == 0  # asking more than the limit: the limit


def test_reset_durations_are_in_openais_format() -> None:
    assert [reset_duration(s) for s in (0.12, 1.0, 1.2, 59.5, 360.0)] == [
        "120ms",
        "1s",
        "2s",
        "1m0s",
        "6m0s",
    ]


def test_requests_per_minute_refuse_with_retry_after_and_headers() -> None:
    quota = TenantQuota(Tenant("a", requests_per_minute=2))
    quota.admit(10, 0.0).finish()
    quota.admit(10, 0.0).finish()
    refusal = refused(quota, 10, 0.0).refusal
    assert (refusal.status, refusal.code) == (429, "requests_per_minute_exceeded")
    assert refusal.headers["retry-after"] == "30"
    assert refusal.headers["x-ratelimit-limit-requests"] == "2"
    assert refusal.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-limit-tokens" not in refusal.headers  # no token limit: no token headers
    quota.admit(10, 30.0)  # served again once its window allows


def test_tokens_are_counted_exactly_as_served() -> None:
    quota = TenantQuota(Tenant("a", tokens_per_minute=600))
    lease = quota.admit(100, 0.0)
    lease.finish(250, 0.0)
    lease.finish(999, 0.0)  # once only
    assert quota.tokens_served == 350 and quota.in_flight == 0
    assert quota.headers(0.0)["x-ratelimit-remaining-tokens"] == "250"
    refusal = refused(quota, 300, 0.0).refusal
    assert refusal.code == "tokens_per_minute_exceeded"
    assert refusal.headers["retry-after"] == "5"  # 50 tokens short at 10 a second
    assert quota.admit(300, 5.0).tokens == 300


def test_a_prompt_over_the_whole_limit_is_never_retried() -> None:
    quota = TenantQuota(Tenant("a", tokens_per_minute=100))
    refusal = refused(quota, 101, 0.0).refusal
    assert refusal.code == "request_too_large" and refusal.headers["x-should-retry"] == "false"


def test_concurrency_counts_requests_under_way() -> None:
    quota = TenantQuota(Tenant("a", max_concurrency=1))
    lease = quota.admit(1, 0.0)
    assert refused(quota, 1, 0.0).refusal.code == "concurrency_limit_exceeded"
    lease.finish()
    quota.admit(1, 0.0)


def test_the_book_remakes_a_quota_when_the_tenants_limits_change() -> None:
    book = QuotaBook()
    first = book.of(Tenant("a", requests_per_minute=1))
    assert book.of(Tenant("a", requests_per_minute=1)) is first
    assert book.of(Tenant("a", requests_per_minute=5)) is not first
