"""Every series of the engine's and router's that the chart's dashboards and alerts read is there
on a live engine and router: one `pagedock serve` (LoRA on, so its per-adapter family registers)
behind one `pagedock route`, one request through the router, then both /metrics read with
prometheus_client's parser. The operator's series: test_operator_metrics_live.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.samples import Sample

from tests.k8s_operator.chart import prometheus_rule
from tests.k8s_operator.exported_metrics import fleet_families, parse_scrape, series_index
from tests.k8s_operator.monitoring_queries import chart_queries, parse, selectors
from tests.router.live import Process, replica_process, router_process, wait_synced

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Families that one answered request leaves without samples: they count events it did not
# cause. For these the scrape must show the family (its HELP and TYPE lines), not a series.
AFTER_AN_EVENT = {
    "pagedock_router_retries": "a replica failed before its first byte",
    "pagedock_router_stream_resumes": "a replica failed mid-stream",
    "pagedock_router_failed_requests": "no replica could serve a request",
    "pagedock:lora_requests": "a request for a LoRA adapter finished",
    "pagedock:tenant_requests_rejected": "the engine refused a tenant's request",
    "pagedock_router_tenant_requests_rejected": "the router refused a tenant's request",
}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Sample]]]:
    """Each family both processes expose after one request, with its samples."""
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))
    logs = tmp_path_factory.mktemp("logs")
    replica = replica_process(model, logs, 64)
    replica.args += ["--enable-lora"]
    router = router_process(model, logs, [replica.url])
    try:
        replica.start().wait_ready()
        router.start().wait_ready(timeout_s=30)
        wait_synced(router, [replica.url], timeout_s=30)
        body = {"prompt": "paged attention", "max_tokens": 4, "temperature": 0}
        response = httpx.post(router.url + "/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        yield scrape(replica) | scrape(router)
    finally:
        for process in (router, replica):
            process.kill()


def scrape(process: Process) -> dict[str, list[Sample]]:
    return parse_scrape(httpx.get(process.url + "/metrics", timeout=10).text)


def test_every_series_the_chart_reads_is_on_the_live_engine_or_router(
    scraped: dict[str, list[Sample]],
) -> None:
    index = series_index(fleet_families())
    read = {
        selector.series
        for query in chart_queries(prometheus_rule())
        for selector in selectors(parse(query.expr))
        if selector.series in index  # the operator's: test_operator_metrics_live.py
    }
    missing, without_samples = [], set()
    for series in sorted(read):
        family = index[series].name
        if family not in scraped:
            missing.append(f"{series}: the family {family} is not registered")
        elif series not in {sample.name for sample in scraped[family]}:
            without_samples.add(family)
    assert not missing, "\n".join(missing)
    # Only the event counters may lack samples (each of them read by some query).
    assert set(AFTER_AN_EVENT) <= {index[series].name for series in read}
    assert without_samples <= set(AFTER_AN_EVENT), without_samples - set(AFTER_AN_EVENT)


def test_the_live_series_carry_the_labels_the_queries_were_checked_against(
    scraped: dict[str, list[Sample]],
) -> None:
    """tests/k8s_operator/test_dashboards.py checks labels against the registered label names;
    the live series carry exactly those (plus `le` on histogram buckets)."""
    families = fleet_families()
    assert set(scraped) == set(families), set(scraped) ^ set(families)
    for name, samples in scraped.items():
        for sample in samples:
            assert set(sample.labels) - {"le"} == families[name].labels, (name, sample)
