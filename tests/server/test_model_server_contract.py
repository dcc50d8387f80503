"""vLLM's model-server contract, as endpoint pickers (llm-d, the Gateway API Inference Extension)
use it: the render endpoints, the metrics they scrape, and the KV events of a live engine."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, free_port, start_server

NUM_BLOCKS = 64
BLOCK_SIZE = 16
# The Gateway API Inference Extension's model-server protocol, with vLLM's names.
PICKER_METRICS = {
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:lora_requests_info",
    "vllm:cache_config_info",
}


@pytest.fixture(scope="module")
def server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{free_port()}",
        "replay_endpoint": f"tcp://*:{free_port()}",
        "topic": "kv@127.0.0.1:8000@tiny",
    }
    args = tiny_server_args(
        tiny_model_dir,
        "--num-kv-blocks",
        str(NUM_BLOCKS),
        "--max-model-len",
        "256",
        "--block-size",
        str(BLOCK_SIZE),
    )
    env = {"PAGEDOCK_KV_EVENTS_CONFIG": json.dumps(config)}  # the env var, as the operator sets it
    s = start_server(args, tmp_path_factory.mktemp("logs") / "contract.log", env)
    s.kv_config = config  # type: ignore[attr-defined]
    yield s
    s.stop()


def families(server: ServerProcess) -> dict[str, list[dict[str, str]]]:
    text = httpx.get(f"{server.url}/metrics").text
    return {f.name: [s.labels for s in f.samples] for f in text_string_to_metric_families(text)}


def test_picker_metrics_are_there_with_vllms_names(server: ServerProcess) -> None:
    assert set(families(server)) >= PICKER_METRICS


def test_cache_config_info_names_the_block_size_and_count(server: ServerProcess) -> None:
    (labels,) = families(server)["vllm:cache_config_info"]
    assert labels["block_size"] == str(BLOCK_SIZE)
    assert labels["num_gpu_blocks"] == str(NUM_BLOCKS)


def test_lora_requests_info_lists_no_adapters(server: ServerProcess) -> None:
    (labels,) = families(server)["vllm:lora_requests_info"]
    assert labels == {"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""}


def test_chat_render_gives_the_token_ids_generation_prefills(server: ServerProcess) -> None:
    body = {"messages": [{"role": "user", "content": "render me"}], "max_tokens": 3}
    rendered = httpx.post(f"{server.url}/v1/chat/completions/render", json=body).json()
    tokenized = httpx.post(f"{server.url}/tokenize", json={"messages": body["messages"]}).json()
    assert rendered["token_ids"] == tokenized["tokens"]
    assert rendered["sampling_params"]["max_tokens"] == 3
    served = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).json()
    assert served["usage"]["prompt_tokens"] == len(rendered["token_ids"])


def test_completions_render_gives_one_request_per_prompt(server: ServerProcess) -> None:
    url = f"{server.url}/v1/completions/render"
    by_ids = httpx.post(url, json={"prompt": [[5, 6, 7], [8, 9]], "max_tokens": 2}).json()
    assert [r["token_ids"] for r in by_ids] == [[5, 6, 7], [8, 9]]
    by_text = httpx.post(url, json={"prompt": ["one prompt", "two"]}).json()
    text_ids = httpx.post(f"{server.url}/tokenize", json={"prompt": "one prompt"}).json()["tokens"]
    assert len(by_text) == 2 and by_text[0]["token_ids"] == text_ids


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": [5, 10**9]},  # outside the vocabulary
        {"prompt": [5, 6], "stop_token_ids": [10**9]},
        {"prompt": [5] * 300},  # longer than max_model_len 256
        {"prompt": [5] * 200, "max_tokens": 100},  # no room for max_tokens
        {"prompt": []},
        {"prompt": [5, 6], "continuation": {"token_ids": [7]}},  # a continuation needs a stream
        {"prompt": [5, 6], "stream": True, "continuation": {"token_ids": [7, 10**9]}},
    ],
)
def test_render_refuses_what_generation_refuses(
    server: ServerProcess, body: dict[str, Any]
) -> None:
    rendered = httpx.post(f"{server.url}/v1/completions/render", json=body)
    generated = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert rendered.status_code == generated.status_code == 400
    assert rendered.json()["error"]["message"] == generated.json()["error"]["message"]


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    "extra",
    [
        {"top_logprobs": 2},  # without logprobs: true
        {"tools": [TOOL], "tool_choice": "auto"},  # this server does not enable auto tool choice
        {"max_tokens": 300},  # more than the context holds
        {"stop_token_ids": [10**9]},
    ],
)
def test_chat_render_refuses_what_chat_generation_refuses(
    server: ServerProcess, extra: dict[str, Any]
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    rendered = httpx.post(f"{server.url}/v1/chat/completions/render", json=body)
    generated = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert rendered.status_code == generated.status_code == 400
    assert rendered.json()["error"]["message"] == generated.json()["error"]["message"]


def test_render_errors_have_openais_shape(server: ServerProcess) -> None:
    wrong_model = {"model": "no-such-model", "prompt": "x"}
    assert httpx.post(f"{server.url}/v1/completions/render", json=wrong_model).status_code == 404
    response = httpx.post(f"{server.url}/v1/chat/completions/render", json={"messages": []})
    assert response.status_code == 400 and response.json()["error"]["type"]


def test_render_resolves_max_tokens_as_generation_would(server: ServerProcess) -> None:
    (rendered,) = httpx.post(
        f"{server.url}/v1/completions/render", json={"prompt": [5, 6, 7], "max_tokens": None}
    ).json()
    assert rendered["sampling_params"]["max_tokens"] == 256 - 3


def test_a_served_prompt_is_announced_with_its_tokens(server: ServerProcess) -> None:
    config = server.kv_config  # type: ignore[attr-defined]
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(config["endpoint"].replace("*", "127.0.0.1"))
    time.sleep(0.5)  # the subscription reaches the publisher (ZMQ's slow joiner)
    prompt = list(range(40, 40 + 3 * BLOCK_SIZE + 5))  # three full blocks
    body = {"prompt": prompt, "max_tokens": 1}
    httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).raise_for_status()
    by_parent: dict[int | None, dict[str, object]] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(chain(by_parent, prompt)) < 3 * BLOCK_SIZE:
        if not sub.poll(1000):
            continue
        topic, _, payload = sub.recv_multipart()
        assert topic == b"kv@127.0.0.1:8000@tiny"
        for event in msgpack.unpackb(payload)[1]:
            if event["type"] == "BlockStored":
                by_parent[event["parent_block_hash"]] = event
    assert chain(by_parent, prompt)[: 3 * BLOCK_SIZE] == prompt[: 3 * BLOCK_SIZE]
    sub.close()


def chain(by_parent: dict[int | None, dict[str, object]], prompt: list[int]) -> list[int]:
    """The tokens of the stored blocks chained from a root whose first block starts the prompt."""
    event = by_parent.get(None)
    if event is None or event["token_ids"][:BLOCK_SIZE] != prompt[:BLOCK_SIZE]:  # type: ignore[index]
        return []
    tokens: list[int] = []
    while event is not None:
        tokens += event["token_ids"]  # type: ignore[arg-type]
        event = by_parent.get(event["block_hashes"][-1])  # type: ignore[index]
    return tokens
