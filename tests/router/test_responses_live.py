"""A Responses API conversation through a live `pagedock route` in front of two live
`pagedock serve` engines that share a Redis store (a real redis-server), driven by the `openai`
client: every turn of a conversation lands on the replica that holds its KV blocks and finds its
prefix cached there; once that replica is gone, the other engine answers the next turn from the
shared store, exactly as the conversation sent to it as one chat completion."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from router.http.proxy import REPLICA_HEADER
from tests.redis_server import start_redis
from tests.router.live import Process, replica_process, router_process, running_fleet

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
INSTRUCTIONS = "You answer questions about paged attention, prefix caching and KV blocks. " * 3
TURNS = ["What is a KV block?", "Why share them?", "Who evicts them?", "And after a restart?"]
MAX_OUTPUT_TOKENS = 4  # each turn is `incomplete`: the random-weight model rarely stops sooner


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, list[Process]]]:
    """A router in front of two engines on one Redis store."""
    from tests.tiny_model import make_tiny_llama_dir

    model = make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))
    logs = tmp_path_factory.mktemp("logs")
    redis = start_redis(tmp_path_factory.mktemp("redis"))
    replicas = [replica_process(model, logs, 256) for _ in range(2)]
    for replica in replicas:
        replica.args += ["--responses-store", redis.url]
    router = router_process(model, logs, [r.url for r in replicas])
    try:
        with running_fleet([router], replicas):
            yield router, replicas
    finally:
        redis.stop()


def turn(
    client: openai.OpenAI, text: str, previous: str | None, stream: bool = False
) -> tuple[Any, str]:
    """One turn (streamed: its events read to the end): the response and the replica that
    answered it."""
    raw = client.responses.with_raw_response.create(
        model=client.models.list().data[0].id,
        instructions=INSTRUCTIONS,
        input=text,
        previous_response_id=previous,
        max_output_tokens=MAX_OUTPUT_TOKENS,
        temperature=0,
        stream=stream,
    )
    if not stream:
        return raw.parse(), raw.headers[REPLICA_HEADER]
    events = list(raw.parse())
    assert events[0].type == "response.created"
    return events[-1].response, raw.headers[REPLICA_HEADER]


def as_chat(engine: Process, model: str, turns: list[tuple[str, str]], text: str) -> str:
    """The conversation (instructions, then each (input, output) turn, then `text`) as one chat
    completion on `engine`, greedy."""
    messages = [{"role": "system", "content": INSTRUCTIONS}]
    for said, answered in turns:
        messages += [{"role": "user", "content": said}, {"role": "assistant", "content": answered}]
    messages.append({"role": "user", "content": text})
    body = {
        "model": model,
        "messages": messages,
        "max_completion_tokens": MAX_OUTPUT_TOKENS,
        "temperature": 0,
    }
    response = httpx.post(engine.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def test_a_conversation_stays_on_its_replica_and_survives_it_on_a_shared_store(
    fleet: tuple[Process, list[Process]],
) -> None:
    router, replicas = fleet
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0)
    previous: str | None = None
    answered, history = [], []
    for i, text in enumerate(TURNS[:3]):
        # The second turn streams: the third finds its replica by the id of its first event.
        response, replica = turn(client, text, previous, stream=i == 1)
        assert response.error is None and response.previous_response_id == previous
        answered.append((replica, response.usage.input_tokens_details.cached_tokens))
        history.append((text, response.output_text))
        previous = response.id
    producer = answered[0][0]
    assert [replica for replica, _ in answered] == [producer] * 3, answered
    assert all(cached > 0 for _, cached in answered[1:]), answered

    [survivor] = [r for r in replicas if r.url != producer]
    [gone] = [r for r in replicas if r.url == producer]
    gone.kill()
    response, replica = turn(client, TURNS[3], previous)
    assert replica == survivor.url
    assert response.error is None and response.previous_response_id == previous
    assert response.output_text == as_chat(survivor, response.model, history, TURNS[3])
