"""A client that goes away aborts its request at once: its KV blocks return to the pool."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import TINY_NUM_KV_BLOCKS
from tests.server.server_process import ServerProcess

LONG = {"prompt": "The quick brown fox " * 8, "max_tokens": 450, "ignore_eos": True}


def free_blocks(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "pagedock:kv_cache_free_blocks":
            return family.samples[0].value
    raise AssertionError("no pagedock:kv_cache_free_blocks metric")


def wait_for_free_blocks(url: str, expected: int, timeout_s: float = 3.0) -> float:
    deadline = time.monotonic() + timeout_s
    while (value := free_blocks(url)) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


def test_closing_a_stream_frees_its_blocks(tiny_server: ServerProcess) -> None:
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{tiny_server.url}/v1/completions", json={**LONG, "stream": True}
        ) as r,
    ):
        lines = r.iter_lines()
        for _ in range(6):  # a few tokens in: the request holds blocks now
            next(lines)
        assert free_blocks(tiny_server.url) < TINY_NUM_KV_BLOCKS
    # The connection is closed; the request had ~390 tokens left to generate.
    assert wait_for_free_blocks(tiny_server.url, TINY_NUM_KV_BLOCKS) == TINY_NUM_KV_BLOCKS


def test_a_non_streaming_client_timing_out_frees_its_blocks(tiny_server: ServerProcess) -> None:
    try:
        httpx.post(f"{tiny_server.url}/v1/completions", json=LONG, timeout=0.15)
    except httpx.TimeoutException:
        pass
    else:
        raise AssertionError("the request should have outlived the client's timeout")
    assert wait_for_free_blocks(tiny_server.url, TINY_NUM_KV_BLOCKS) == TINY_NUM_KV_BLOCKS
    # ...and the abort is what ended it, not the 400 tokens running out.
    metrics = httpx.get(f"{tiny_server.url}/metrics").text
    assert 'vllm:request_success_total{finished_reason="abort"' in metrics
