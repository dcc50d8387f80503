"""Admission control, auth, body size, context length and bad input: always a 4xx in OpenAI's
error shape, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import LONG_MAX_MODEL_LEN, tiny_server_args
from tests.server.server_process import ServerProcess, start_server

API_KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_MODEL_LEN = LONG_MAX_MODEL_LEN
MAX_BODY_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def limited_server(
    long_tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    # A long context, so one request can hold the only sequence slot for seconds.
    args = tiny_server_args(
        long_tiny_model_dir,
        "--max-num-seqs",
        "1",
        "--max-waiting",
        "1",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-body-bytes",
        str(MAX_BODY_BYTES),
    )
    log = tmp_path_factory.mktemp("logs") / "limited-server.log"
    # The key comes from the environment, as in a container.
    server = start_server(args, log, env={"PAGEDOCK_API_KEY": API_KEY})
    yield server
    server.stop()


def post(server: ServerProcess, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=AUTH, timeout=30, **kwargs)


def assert_openai_error(
    response: httpx.Response, status: int, param: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param
    result: dict[str, Any] = error
    return result


# ---- admission ----------------------------------------------------------------------------


def test_requests_beyond_max_waiting_get_429_with_retry_after(
    limited_server: ServerProcess,
) -> None:
    long = {"prompt": "abc", "max_tokens": MAX_MODEL_LEN - 10, "ignore_eos": True, "stream": True}
    with (
        httpx.Client(base_url=limited_server.url, headers=AUTH, timeout=30) as client,
        client.stream("POST", "/v1/completions", json=long) as running,
    ):
        # NOTE: keep the iterator: a dropped one closes the response (and so the request).
        lines = running.iter_lines()
        next(lines)  # generating: it holds the only sequence slot
        with client.stream("POST", "/v1/completions", json=long) as waiting:
            assert waiting.status_code == 200  # admitted; waits for the slot
            rejected = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 2})
            error = assert_openai_error(rejected, 429)
            assert rejected.headers["Retry-After"] == "1"
            assert error["type"] == "rate_limit_error"


# ---- auth ---------------------------------------------------------------------------------


def test_v1_routes_need_the_api_key(limited_server: ServerProcess) -> None:
    url = f"{limited_server.url}/v1/models"
    missing = httpx.get(url)
    assert_openai_error(missing, 401)
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert_openai_error(httpx.get(url, headers={"Authorization": "Bearer wrong"}), 401)
    assert_openai_error(httpx.get(url, headers={"Authorization": API_KEY}), 401)  # no scheme
    assert httpx.get(url, headers=AUTH).status_code == 200


def test_the_openai_client_reports_a_bad_key(limited_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=f"{limited_server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.completions.create(model="x", prompt="hi", max_tokens=1)


def test_probes_and_metrics_stay_open(limited_server: ServerProcess) -> None:
    assert httpx.get(f"{limited_server.url}/health").status_code == 200
    assert httpx.get(f"{limited_server.url}/metrics").status_code == 200


# ---- size and length ----------------------------------------------------------------------


def test_body_over_the_limit_gets_413(limited_server: ServerProcess) -> None:
    big = {"prompt": "x" * MAX_BODY_BYTES, "max_tokens": 1}
    assert_openai_error(post(limited_server, "/v1/completions", big), 413)


def test_chunked_body_over_the_limit_gets_413(limited_server: ServerProcess) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must count as it reads
        yield b'{"prompt": "'
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"x" * 1024
        yield b'", "max_tokens": 1}'

    response = httpx.post(
        f"{limited_server.url}/v1/completions",
        content=chunks(),
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert_openai_error(response, 413)


def test_prompt_longer_than_the_context_gets_400_with_the_numbers(
    limited_server: ServerProcess,
) -> None:
    response = post(limited_server, "/v1/completions", {"prompt": [5] * (MAX_MODEL_LEN + 1)})
    error = assert_openai_error(response, 400, "prompt")
    assert str(MAX_MODEL_LEN + 1) in error["message"] and str(MAX_MODEL_LEN) in error["message"]
    assert error["code"] == "context_length_exceeded"


def test_prompt_plus_max_tokens_beyond_the_context_gets_400(limited_server: ServerProcess) -> None:
    body = {"prompt": [5] * 100, "max_tokens": MAX_MODEL_LEN}
    error = assert_openai_error(post(limited_server, "/v1/completions", body), 400, "max_tokens")
    assert str(MAX_MODEL_LEN + 100) in error["message"]


# ---- bad input ----------------------------------------------------------------------------


def test_malformed_json_gets_400(limited_server: ServerProcess) -> None:
    response = httpx.post(
        f"{limited_server.url}/v1/chat/completions",
        content=b'{"messages": [',
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert_openai_error(response, 400)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, "max_tokens"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 1000}, "n"),
        ({"messages": [{"role": "user", "content": "hi"}], "top_p": 0}, "top_p"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
            "tools",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema"},  # without its schema
            },
            "response_format.json_schema",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "hi"}], "seed": 2**70}, "seed"),
    ],
)
def test_wrong_or_unsupported_fields_get_400_naming_the_param(
    limited_server: ServerProcess, body: dict[str, Any], param: str
) -> None:
    assert_openai_error(post(limited_server, "/v1/chat/completions", body), 400, param)


def test_unknown_model_gets_404(limited_server: ServerProcess) -> None:
    body = {"model": "gpt-17", "prompt": "hi", "max_tokens": 1}
    error = assert_openai_error(post(limited_server, "/v1/completions", body), 404, "model")
    assert error["code"] == "model_not_found"


def test_unknown_route_gets_404_in_openai_shape(limited_server: ServerProcess) -> None:
    assert_openai_error(httpx.get(f"{limited_server.url}/v1/nothing-here", headers=AUTH), 404)
