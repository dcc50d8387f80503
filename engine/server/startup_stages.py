"""The server's view of its cold start (engine/startup_stages.py): one Prometheus gauge per stage
reached, read from the process's recorder at each scrape, so stages reached after the metrics
were built (ready, the first request) show up without anyone setting them.

    pagedock:startup_stage_seconds{stage="weights_loaded"} 3.42
    pagedock:process_start_time_seconds 1.7648e9

The first is seconds from the process's start to the stage; the second the process's start as
a Unix time (which start the figures belong to).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from engine.startup_stages import StartupStages

STAGE_METRIC = "pagedock:startup_stage_seconds"
PROCESS_START_METRIC = "pagedock:process_start_time_seconds"


class StartupStagesCollector:
    """Renders a StartupStages recorder at each scrape."""

    def __init__(self, stages: StartupStages) -> None:
        self._stages = stages

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reached = GaugeMetricFamily(
            STAGE_METRIC,
            "Seconds from the process's start to each start-up stage it reached (process_start, "
            "imports_done, weights_located, kernels_ready, weights_loaded, warmup_done, ready, "
            "first_request_served).",
            labels=["stage"],
        )
        for stage, seconds in self._stages.seconds().items():
            reached.add_metric([stage], seconds)
        yield reached
        yield GaugeMetricFamily(
            PROCESS_START_METRIC,
            "Unix time this engine process started.",
            value=self._stages.process_start_time,
        )
