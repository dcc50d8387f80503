"""GET /startup and pagedock:startup_stage_seconds: a real server reports every stage of its
start in order, and its first finished request as the last one."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.startup_stages import STAGES
from tests.eventually import eventually
from tests.server.server_process import ServerProcess

BEFORE_A_REQUEST = STAGES[:-1]


def startup(server: ServerProcess) -> dict:
    response = httpx.get(f"{server.url}/startup")
    assert response.status_code == 200
    return dict(response.json())


def stage_gauges(server: ServerProcess) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics").text
    return {
        sample.labels["stage"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "pagedock:startup_stage_seconds"
        for sample in family.samples
    }


def test_every_stage_up_to_ready_is_reported_in_order(tiny_server: ServerProcess) -> None:
    report = startup(tiny_server)
    stages = report["stages"]

    assert [s for s in BEFORE_A_REQUEST if s in stages] == list(BEFORE_A_REQUEST)
    times = [stages[s] for s in BEFORE_A_REQUEST]
    assert times == sorted(times), stages
    assert stages["process_start"] == 0.0
    # The process started before this test could see it answer, and not long before that.
    assert report["process_start_time"] < time.time()
    assert stages["ready"] < time.time() - report["process_start_time"]


@pytest.mark.asyncio
async def test_the_first_finished_request_is_the_last_stage(tiny_server: ServerProcess) -> None:
    body = {"prompt": "Hello", "max_tokens": 2}
    assert httpx.post(f"{tiny_server.url}/v1/completions", json=body).status_code == 200

    def served() -> float | None:
        return startup(tiny_server)["stages"].get("first_request_served")

    first = await eventually(served, 10, lambda: f"stages {startup(tiny_server)['stages']}")
    assert first >= startup(tiny_server)["stages"]["ready"]


def test_the_gauges_say_what_the_endpoint_says(tiny_server: ServerProcess) -> None:
    gauges = stage_gauges(tiny_server)
    assert gauges == startup(tiny_server)["stages"]
