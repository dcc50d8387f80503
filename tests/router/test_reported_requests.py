"""A replica's reported requests, as the router counts them between scrapes: its last report less
the requests this router saw end there since the report was asked for."""

from __future__ import annotations

import httpx
import pytest

from router.config import RouterConfig
from router.replicas.health import HealthChecker
from router.replicas.replica import Replica, ReplicaLoad


def test_a_request_seen_ending_leaves_the_report_at_once() -> None:
    replica = Replica("http://a", load=ReplicaLoad(num_requests_running=1.0))
    replica.begin("r1", 16)
    assert replica.reported_requests() == (1.0, 0.0)
    replica.end("r1")
    assert replica.reported_requests() == (0.0, 0.0)
    replica.end("r1")  # ending twice counts once
    assert replica.finished == 1


def test_ends_beyond_the_running_come_off_the_waiting_and_never_below_zero() -> None:
    load = ReplicaLoad(num_requests_running=1.0, num_requests_waiting=2.0)
    replica = Replica("http://a", load=load)
    for i in range(2):
        replica.begin(f"r{i}", 16)
        replica.end(f"r{i}")
    assert replica.reported_requests() == (0.0, 1.0)
    for i in range(2, 6):
        replica.begin(f"r{i}", 16)
        replica.end(f"r{i}")
    assert replica.reported_requests() == (0.0, 0.0)


def test_queued_tokens_count_the_report_less_what_ended() -> None:
    config = RouterConfig(replicas=["http://a"], model=None)
    replica = Replica("http://a", load=ReplicaLoad(num_requests_running=2.0))
    replica.begin("r1", 16)
    replica.end("r1")
    assert replica.queued_tokens(config) == int(config.running_request_tokens)


@pytest.mark.asyncio
async def test_a_scrape_counts_only_the_ends_after_it_was_asked_for() -> None:
    """A request that ends while the scrape is on its way may or may not be in the report: it is
    taken off (the report is read as of the ask), and the ends before the ask are not."""
    replica = Replica("http://a")
    replica.begin("before", 16)
    replica.end("before")  # before the ask: the engine's report no longer has it
    replica.begin("during", 16)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            replica.end("during")  # ends while the report is being read
            return httpx.Response(200, text="vllm:num_requests_running 1.0\n")
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": []})
        return httpx.Response(200, json={})

    config = RouterConfig(replicas=["http://a"], model=None)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        assert await HealthChecker(replica, client, config, lambda r, why: None).check()
    assert replica.load.num_requests_running == 1.0
    assert replica.reported_requests() == (0.0, 0.0)
