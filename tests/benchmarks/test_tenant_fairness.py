"""The tenant benchmark's pieces (benchmarks/tenant_client.py, benchmarks/tenant_fairness.py),
and one short live run of its client against a router with a tenants file."""

from __future__ import annotations

import asyncio
import json
import random
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from benchmarks import tenant_client as tc
from benchmarks.tenant_fairness import ratio
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router


def test_arrivals_are_seeded_and_within_the_duration() -> None:
    first = tc.arrivals(random.Random(1), 20.0, 10.0)
    assert first == tc.arrivals(random.Random(1), 20.0, 10.0)
    assert 150 < len(first) < 250 and all(0 <= t < 10.0 for t in first)


def test_prompts_are_random_ids_of_the_asked_length() -> None:
    ids = tc.prompt(random.Random(0), 128)
    assert len(ids) == 128 and all(i in tc.VOCAB for i in ids)


def test_summary_counts_outcomes_and_takes_percentiles_of_the_served() -> None:
    sent = [tc.Sent("a", 200, ttft_s=i / 100) for i in range(1, 101)]
    sent += [tc.Sent("a", 429, code="fleet_saturated")] * 3
    row = tc.summary(sent)
    assert row["outcomes"] == {"ok": 100, "429 fleet_saturated": 3}
    assert (row["ttft_p50_s"], row["ttft_p99_s"], row["ttft_max_s"]) == (0.505, 0.99, 1.0)


def test_counter_total_sums_a_counters_samples_from_metrics() -> None:
    text = (
        "# TYPE pagedock:interrupted_steps counter\n"
        'pagedock:interrupted_steps_total{model_name="m"} 3.0\n'
        'pagedock:interrupted_steps_created{model_name="m"} 1.7e9\n'
    )
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=text))

    async def total(name: str) -> float:
        async with httpx.AsyncClient(transport=transport) as client:
            return await tc.counter_total(client, "http://engine", name)

    assert asyncio.run(total("pagedock:interrupted_steps_total")) == 3.0
    assert asyncio.run(total("pagedock:absent_total")) == 0


def test_router_waits_reads_one_tenants_flow_queue_wait_histogram() -> None:
    name = "pagedock_router_flow_queue_wait_seconds"
    buckets = {"0.001": (1, 2), "0.01": (3, 2), "0.1": (4, 3), "+Inf": (5, 3)}  # le: (b, a)
    lines = [f"# TYPE {name} histogram"]
    for le, (b, a) in buckets.items():
        lines.append(f'{name}_bucket{{le="{le}",priority="0",tenant="b"}} {b}')
        lines.append(f'{name}_bucket{{le="{le}",priority="0",tenant="a"}} {a}')
    lines += [
        f'{name}_count{{priority="0",tenant="b"}} 5',
        f'{name}_sum{{priority="0",tenant="b"}} 1.5',
    ]
    text = "\n".join(lines) + "\n"
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=text))

    async def waits() -> dict[str, float]:
        async with httpx.AsyncClient(transport=transport) as client:
            return await tc.router_waits(client, "http://router", "b")

    assert asyncio.run(waits()) == {"requests": 5, "total_s": 1.5, "over_10ms": 2, "over_100ms": 1}


def test_ratio_pairs_each_repetition_with_its_own_baseline() -> None:
    rows = [
        {"arm": "alone", "repetition": 0, "b": {"ttft_p99_s": 0.1}},
        {"arm": "vtc", "repetition": 0, "b": {"ttft_p99_s": 0.12}},
        {"arm": "alone", "repetition": 1, "b": {"ttft_p99_s": 0.2}},
        {"arm": "vtc", "repetition": 1, "b": {"ttft_p99_s": 0.3}},
    ]
    assert ratio(rows, "vtc", "alone", "b") == {
        "median": 1.35,
        "min": 1.2,
        "max": 1.5,
        "per_repetition": [1.2, 1.5],
    }


@pytest.mark.timeout(60)
def test_the_client_reads_streams_and_refusals(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps([{"name": "b", "api_keys": ["sk-b"]}]))
    fake = FakeReplica("stream")
    with ExitStack() as stack:
        replica = stack.enter_context(ServerThread(fake.app))
        router = serve_router(stack, [replica.url], tenants=str(tenants))

        async def both() -> list[tc.Sent]:
            async with httpx.AsyncClient(timeout=30) as client:
                body = tc.body_of([1, 2, 3], 4)
                return await tc.closed_loop(client, router, "sk-b", "b", [body, body, body], 2) + [
                    await tc.send(client, router, "sk-unknown", "x", body)
                ]

        sent = asyncio.run(both())
    assert [s.status for s in sent] == [200, 200, 200, 401]
    assert all(s.ttft_s is not None and s.ttft_s <= s.e2e_s for s in sent[:3])
    assert sent[3].code == "invalid_api_key"
