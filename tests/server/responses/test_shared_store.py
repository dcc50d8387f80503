"""The Responses API's store in Redis, shared by two `pagedock serve` processes (a real
redis-server, started here): a follow-up sent to the other server rebuilds its conversation from
the store, what one server deletes is gone from both, and a store that does not answer is a 503
in OpenAI's shape, never a follow-up that forgot its conversation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from pagedock.responses_store.redis_store import RedisResponsesStore
from tests.protocol.apps import client, server_app
from tests.redis_server import RedisServer, start_redis
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fleet(
    tiny_model_dir: Path, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    """Two engines on one Redis."""
    logs = tmp_path_factory.mktemp("logs")
    args = tiny_server_args(
        tiny_model_dir,
        "--max-model-len",
        "512",
        "--responses-store",
        redis_server.url,
        "--responses-store-ttl-s",
        "600",
    )
    # Both start at once (each loads the model), then each is waited for.
    servers = [ServerProcess(args, logs / f"engine-{name}.log") for name in ("a", "b")]
    try:
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


def openai_client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def prompt_tokens(server: ServerProcess, messages: list[dict[str, str]]) -> int:
    response = httpx.post(f"{server.url}/tokenize", json={"messages": messages}, timeout=60)
    assert response.status_code == 200, response.text
    count: int = response.json()["count"]
    return count


def test_a_follow_up_on_the_other_server_rebuilds_the_conversation_from_redis(
    fleet: list[ServerProcess],
) -> None:
    a, b = fleet
    model = openai_client(a).models.list().data[0].id
    first = openai_client(a).responses.create(
        model=model, input="Paged attention keeps", max_output_tokens=4, temperature=0
    )
    second = openai_client(b).responses.create(
        model=model,
        input="Prefix caching reuses",
        previous_response_id=first.id,
        max_output_tokens=4,
        temperature=0,
    )
    conversation = [
        {"role": "user", "content": "Paged attention keeps"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Prefix caching reuses"},
    ]
    assert second.usage is not None
    assert second.usage.input_tokens == prompt_tokens(b, conversation)
    third = openai_client(a).responses.create(
        model=model, input="Again", previous_response_id=second.id, max_output_tokens=2
    )
    assert third.usage is not None
    assert third.usage.input_tokens == prompt_tokens(
        a,
        [
            *conversation,
            {"role": "assistant", "content": second.output_text},
            {"role": "user", "content": "Again"},
        ],
    )


def test_what_one_server_stores_the_other_reads_and_deletes(fleet: list[ServerProcess]) -> None:
    a, b = fleet
    model = openai_client(a).models.list().data[0].id
    created = openai_client(a).responses.create(model=model, input="hello", max_output_tokens=2)
    assert openai_client(b).responses.retrieve(created.id).model_dump() == created.model_dump()
    [item] = openai_client(b).responses.input_items.list(created.id).data
    assert item.type == "message"
    openai_client(b).responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        openai_client(a).responses.retrieve(created.id)


def test_a_store_that_does_not_answer_is_a_503(tmp_path: Path) -> None:
    gone = start_redis(tmp_path)
    gone.stop()
    app = server_app()
    app.state.ctx.responses_store = RedisResponsesStore(gone.url)
    http: TestClient = client(app)
    body = {"input": "x", "previous_response_id": "resp_1"}
    response = http.post("/v1/responses", json=body)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "responses_store_unavailable"
    assert http.get("/v1/responses/resp_1").status_code == 503
