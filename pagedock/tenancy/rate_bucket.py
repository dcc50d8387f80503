"""RateBucket: a per-minute limit as a bucket refilled continuously (limit / 60 each second).

A full bucket holds one minute's worth. Admission takes what a request is known to cost up front
(one request; its prompt tokens) and what it costs later (its completion tokens) is taken as it is
known, so the level may go below zero: a tenant in debt waits until the refill pays it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RateBucket:
    limit_per_minute: int
    level: float = field(init=False)
    updated: float = 0.0
    """The clock (time.monotonic()) at the last refill."""

    def __post_init__(self) -> None:
        self.level = float(self.limit_per_minute)

    @property
    def rate_per_s(self) -> float:
        return self.limit_per_minute / 60.0

    def available(self, now: float) -> float:
        """The level at `now` (negative: in debt)."""
        if now > self.updated:
            self.level = min(
                self.limit_per_minute, self.level + (now - self.updated) * self.rate_per_s
            )
            self.updated = now
        return self.level

    def take(self, amount: float, now: float) -> None:
        self.available(now)
        self.level -= amount

    def seconds_until(self, amount: float, now: float) -> float:
        """Seconds until `amount` (at most the limit) is available; 0 if it is now."""
        short = min(amount, self.limit_per_minute) - self.available(now)
        return max(0.0, short / self.rate_per_s)

    def seconds_until_full(self, now: float) -> float:
        return self.seconds_until(self.limit_per_minute, now)


def reset_duration(seconds: float) -> str:
    """OpenAI's x-ratelimit-reset-* format: 120ms, 1s, 6m0s."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    whole = math.ceil(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"
