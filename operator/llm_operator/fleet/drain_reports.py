"""The engines' drain reports: what every ready engine pod says at GET /drain
(engine/server/drain.py) about how long its requests run, combined into one reading:

    drain:
      longestRequestSeconds: 41.2     the longest recent request of any engine (arrival to finish)
      p99RequestSeconds: 30.1         the highest of the engines' p99s
      oldestInFlightSeconds: 12.5     the longest-running open request of any engine
      handoffSeconds: 7               past the drain deadline, the longest an engine needs
      numRequests: 1800               finished requests the figures cover (each engine's window)
      pods: 2                         ready engine pods that answered
      observedAt: "2026-12-02T12:00:00Z"

Each engine keeps its last 1,000 finished requests. A reading without any request (new pods that
have served nothing yet) does not replace the last one with figures: the last 1,000 requests the
deployment served still say how long its requests run. How the reading sizes the drain deadline
and the grace period: llm_operator/drain_timing.py.
"""

import asyncio
import dataclasses
import datetime
from typing import Any

from llm_operator.drain_timing import DrainObservation
from llm_operator.fleet.engine_json import finite_seconds, get_engine_json
from llm_operator.fleet.startup import is_ready
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import POD
from llm_operator.names import ENGINE_PORT, selector_labels, selector_string
from llm_operator.settings import OperatorSettings

Obj = dict[str, Any]
# (status field, report field) of the figures combined by their largest value.
LARGEST = (
    ("longestRequestSeconds", "longest_request_seconds"),
    ("p99RequestSeconds", "p99_request_seconds"),
    ("oldestInFlightSeconds", "oldest_in_flight_seconds"),
    ("handoffSeconds", "handoff_seconds"),
)


@dataclasses.dataclass(frozen=True)
class DrainReading:
    """The engines' reports combined, with status.drain's field names; None: none reported."""

    figures: dict[str, float | None]
    """LARGEST's status fields: the largest any engine reported."""
    num_requests: int
    pods: int
    observed_at: str

    @property
    def has_requests(self) -> bool:
        return any(
            self.figures.get(f) is not None
            for f in ("longestRequestSeconds", "oldestInFlightSeconds")
        )

    def observation(self) -> DrainObservation:
        """What sizes the drain: the longest request, finished or still running."""
        runs = [
            self.figures.get("longestRequestSeconds"),
            self.figures.get("oldestInFlightSeconds"),
        ]
        known = [seconds for seconds in runs if seconds is not None]
        return DrainObservation(max(known, default=None), self.figures.get("handoffSeconds"))

    def to_status(self) -> Obj:
        counts = {"numRequests": self.num_requests, "pods": self.pods}
        return {**self.figures, **counts, "observedAt": self.observed_at}

    @classmethod
    def from_status(cls, drain: Any) -> "DrainReading | None":
        """The reading status.drain holds (written by `to_status`); None if it holds none."""
        if not isinstance(drain, dict) or not isinstance(drain.get("observedAt"), str):
            return None
        figures = {field: _seconds(drain.get(field)) for field, _ in LARGEST}
        counts = _count(drain.get("numRequests")), _count(drain.get("pods"))
        return cls(figures, *counts, drain["observedAt"])


def combine(reports: list[Obj], now: datetime.datetime) -> DrainReading | None:
    """One reading from the engines' GET /drain bodies; None for none."""
    if not reports:
        return None
    figures: dict[str, float | None] = {}
    for field, key in LARGEST:
        values = [v for report in reports if (v := _seconds(report.get(key))) is not None]
        figures[field] = max(values, default=None)
    num_requests = sum(_count(report.get("num_requests")) for report in reports)
    return DrainReading(figures, num_requests, len(reports), now.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _seconds(value: Any) -> float | None:
    seconds = finite_seconds(value)
    return None if seconds is None else max(seconds, 0.0)


@dataclasses.dataclass
class EngineDrainReports:
    """Reads every ready engine pod's GET /drain, once per pass of an LLMDeployment, with the
    metrics (`scrape_metrics`, `scrape_timeout_seconds`)."""

    kube: KubeClient
    settings: OperatorSettings
    port: int = ENGINE_PORT

    async def read(self, namespace: str, name: str, engine: Obj | None) -> DrainReading | None:
        """The reading now, given the live engine Deployment; None when no engine answered (none
        ready, the engines' metrics are not read, or the pods cannot be listed)."""
        ready = ((engine or {}).get("status") or {}).get("readyReplicas", 0)
        if not self.settings.scrape_metrics or not ready:
            return None
        selector = selector_string(selector_labels(name, "engine"))
        try:
            pods = await self.kube.list(POD.collection_path(namespace), selector)
        except KubeError:  # no RBAC for pods yet, an API hiccup: the next pass reads it
            return None
        timeout = self.settings.scrape_timeout_seconds
        ips = [pod["status"]["podIP"] for pod in pods if is_ready(pod)]
        bodies = await asyncio.gather(
            *(get_engine_json(ip, self.port, "/drain", timeout) for ip in ips)
        )
        reports = [body for body in bodies if body is not None]
        return combine(reports, datetime.datetime.now(datetime.UTC))
