"""A request carrying a value no engine step can handle is a 400 in OpenAI's error shape for its
sender, while a good request running beside it completes normally."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.server.inprocess_server import InProcessServer
from tests.server.test_limits import assert_openai_error

GOOD = {"prompt": [5, 6, 7], "max_tokens": 8, "temperature": 0, "ignore_eos": True}

POISONS = [
    ({"prompt": "hi", "stop_token_ids": [600], "min_tokens": 2}, "stop_token_ids"),
    ({"prompt": "hi", "stop_token_ids": [2**63]}, "stop_token_ids.0"),
    ({"prompt": "hi", "top_k": 9223372036854775808}, "top_k"),
    ({"prompt": "hi", "n": 129}, "n"),
    ({"prompt": "hi", "logprobs": 21}, "logprobs"),
    ({"prompt": "hi", "max_tokens": 2**31}, "max_tokens"),
    ({"prompt": "hi", "min_tokens": 2**31}, "min_tokens"),
    ({"prompt": "hi", "seed": 2**64}, "seed"),
    ({"prompt": "hi", "stop": ["x"] * 65}, "stop"),
    ({"prompt": "hi", "stop": "x" * 1025}, "stop"),
    ({"prompt": [5, 2**31]}, "prompt.1"),
    ({"prompt": [5, 600]}, "prompt"),
]


def complete(server: InProcessServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)


@pytest.mark.parametrize(("poison", "param"), POISONS)
def test_a_poison_request_is_a_400_naming_its_param_while_a_good_one_completes(
    inprocess_server: InProcessServer, poison: dict[str, Any], param: str
) -> None:
    expected = complete(inprocess_server, GOOD).json()["choices"][0]["text"]
    with ThreadPoolExecutor(2) as pool:
        good = pool.submit(complete, inprocess_server, GOOD)
        bad = pool.submit(complete, inprocess_server, poison)
        assert_openai_error(bad.result(), 400, param)
        assert good.result().status_code == 200
    assert good.result().json()["choices"][0]["text"] == expected


def test_the_largest_seed_with_n_children_completes(inprocess_server: InProcessServer) -> None:
    body = {"prompt": "hi", "n": 2, "seed": 18446744073709551615, "max_tokens": 4}
    response = complete(inprocess_server, body)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == 2


def test_every_kv_block_is_free_after_the_poison_requests(
    inprocess_server: InProcessServer,
) -> None:
    for poison, _ in POISONS:
        complete(inprocess_server, poison)
    engine = inprocess_server.engine
    assert engine.stats().num_free_kv_blocks == engine.num_kv_blocks
