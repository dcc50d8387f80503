"""RequestDurations: how long this server's requests run, the figures a drain deadline is sized
against (GET /drain, engine/server/drain.py).

Two sources: each finished engine request's arrival to finish (the engine's own timing, the same
figure as `vllm:e2e_request_latency_seconds`), and the arrival of each HTTP request still open, so
a request that has already run longer than any finished one shows too. Memory is bounded: the
durations of the last `window` finished requests, and one arrival per open request (at most
--max-connections). The server's metrics hold one (engine/server/metrics.py), fed with the
finished requests there; generations (openai/generation.py) open and close theirs. Everything
here runs on the event loop.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.request import RequestTiming

DEFAULT_WINDOW = 1000


@dataclass(frozen=True)
class RequestDurationSummary:
    """The recent requests' durations, in seconds; None where there is nothing to say."""

    num_requests: int
    """Finished requests the figures cover (at most the window)."""
    longest_request_seconds: float | None
    """The longest of them, arrival to finish."""
    p99_request_seconds: float | None
    """Their 99th percentile (nearest rank)."""
    oldest_in_flight_seconds: float | None
    """How long the oldest request still open has run; None when none is."""


class RequestDurations:
    """The durations of the last `window` finished requests and the arrivals of the open ones."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        self._finished_s: deque[float] = deque(maxlen=window)
        self._arrivals: dict[str, float] = {}

    def observe_finished(self, timing: RequestTiming) -> None:
        """A request finished; its timing is complete."""
        end = timing.finished_time or timing.arrival_time
        self._finished_s.append(max(end - timing.arrival_time, 0.0))

    def begin(self, key: str, arrival_time: float) -> None:
        """A request opened; `arrival_time` is time.monotonic() at its arrival."""
        self._arrivals[key] = arrival_time

    def end(self, key: str) -> None:
        """The request closed (idempotent)."""
        self._arrivals.pop(key, None)

    def summary(self, now: float | None = None) -> RequestDurationSummary:
        now = time.monotonic() if now is None else now
        durations = sorted(self._finished_s)
        oldest = min(self._arrivals.values(), default=None)
        return RequestDurationSummary(
            num_requests=len(durations),
            longest_request_seconds=durations[-1] if durations else None,
            p99_request_seconds=_nearest_rank(durations, 0.99),
            oldest_in_flight_seconds=None if oldest is None else max(now - oldest, 0.0),
        )


def _nearest_rank(ordered: list[float], quantile: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(math.ceil(quantile * len(ordered)) - 1, 0)]
