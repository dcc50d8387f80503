"""Large request bodies are validated in the validation process (engine/server/large_body_route.py,
pagedock/http/validation_process.py), with the answers a small body gets: served when valid, the
same 400 when not, and the route's guards first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.config import EngineConfig
from engine.server.openai.context import ServerOptions
from pagedock.http.validation_process import LARGE_BODY_BYTES
from tests.server.inprocess_server import InProcessServer
from tests.server.server_process import free_port

API_KEY = "secret-key"
LARGE = LARGE_BODY_BYTES * 2


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[InProcessServer]:
    config = EngineConfig(model=str(tiny_model_dir), num_kv_blocks=64, num_threads=1)
    server = InProcessServer(config, ServerOptions(port=free_port(), api_key=API_KEY)).start()
    yield server
    server.stop()


def post(
    server: InProcessServer, path: str, body: object, key: str | None = API_KEY
) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(server.url + path, content=json.dumps(body), headers=headers, timeout=60)


def test_a_large_valid_body_is_served(server: InProcessServer) -> None:
    body = {"prompt": "hi", "max_tokens": 2, "user": "u" * LARGE}
    response = post(server, "/v1/completions", body)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 2
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "user": "u" * LARGE}
    assert post(server, "/v1/chat/completions", chat).status_code == 200


@pytest.mark.parametrize("size", [100, LARGE], ids=["small", "large"])
def test_a_body_of_the_wrong_shape_gets_the_same_400_whatever_its_size(
    server: InProcessServer, size: int
) -> None:
    response = post(server, "/v1/completions", {"prompt": [1] * size + ["x"], "max_tokens": 1})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == f"prompt.{size}" and "valid integer" in error["message"]


def test_a_large_body_that_is_not_json_is_a_400(server: InProcessServer) -> None:
    response = httpx.post(
        server.url + "/v1/completions",
        content=b'{"prompt": "' + b"x" * LARGE,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "the request body is not valid JSON"


def test_the_guards_answer_before_a_large_body_is_judged(server: InProcessServer) -> None:
    response = post(server, "/v1/completions", {"prompt": [1] * LARGE + ["x"]}, key=None)
    assert response.status_code == 401, response.text
