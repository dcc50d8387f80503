"""/metrics: Prometheus text that prometheus_client parses, with vLLM's names, moving as requests
are served."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.server.server_process import ServerProcess

VLLM_NAMES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
}


def scrape(server: ServerProcess) -> dict[str, float]:
    """Every sample, keyed by name and labels, summed over finish reasons."""
    response = httpx.get(f"{server.url}/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def test_metrics_parse_and_carry_vllm_names_with_model_label(
    tiny_server: ServerProcess, model_name: str
) -> None:
    text = httpx.get(f"{tiny_server.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= VLLM_NAMES
    for name in VLLM_NAMES:
        for sample in families[name].samples:
            assert sample.labels["model_name"] == model_name


def test_metrics_move_as_a_request_is_served(tiny_server: ServerProcess) -> None:
    before = scrape(tiny_server)
    body = {"prompt": "metrics please", "max_tokens": 7, "ignore_eos": True}
    usage = httpx.post(f"{tiny_server.url}/v1/completions", json=body).json()["usage"]
    after = scrape(tiny_server)

    def moved(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert moved("vllm:generation_tokens_total") == 7
    assert moved("vllm:prompt_tokens_total") == usage["prompt_tokens"]
    assert moved("vllm:request_success_total") == 1
    assert moved("vllm:time_to_first_token_seconds_count") == 1
    assert moved("vllm:e2e_request_latency_seconds_count") == 1
    assert moved("vllm:inter_token_latency_seconds_count") >= 1
    assert moved("vllm:prefix_cache_queries_total") >= usage["prompt_tokens"]
    assert after["vllm:num_requests_running"] == 0
