"""POST /v1/embeddings through a live `pagedock route` in front of two live `pagedock serve`
engines, driven by the `openai` client: answered as an engine answers it, sent by load (the idle
replica while the other is busy generating), and still answered once a replica is killed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import openai
import pytest

from router.http.proxy import REPLICA_HEADER
from tests.router.live import (
    Process,
    replica_process,
    replica_view,
    router_process,
    running_fleet,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Running requests on one engine that put it past the router's tie tolerance (each counts 16
# prefill-token equivalents at 0.1 ms each, against 5 ms).
BUSY_STREAMS = 4
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paged attention keeps KV memory."]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, list[Process]]]:
    from tests.tiny_model import make_tiny_llama_dir

    # A 4096-token context, so that a generation runs for seconds.
    model = make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"), max_position_embeddings=4096)
    logs = tmp_path_factory.mktemp("logs")
    args = ("--dtype", "float32", "--max-model-len", "4096")
    replicas = [replica_process(model, logs, 1024, *args) for _ in range(2)]
    router = router_process(model, logs, [r.url for r in replicas])
    with running_fleet([router], replicas):
        yield router, replicas


def client_of(process: Process) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{process.url}/v1", api_key="none", max_retries=0)


def test_the_router_answers_as_an_engine_does(fleet: tuple[Process, list[Process]]) -> None:
    router, replicas = fleet
    model = client_of(router).models.list().data[0].id
    raw = client_of(router).embeddings.with_raw_response.create(model=model, input=TEXTS)
    assert raw.headers[REPLICA_HEADER] in {r.url for r in replicas}
    routed = raw.parse()
    direct = client_of(replicas[0]).embeddings.create(model=model, input=TEXTS)
    assert [d.embedding for d in routed.data] == [d.embedding for d in direct.data]
    assert routed.usage.prompt_tokens == direct.usage.prompt_tokens > 0
    bad = httpx.post(f"{router.url}/v1/embeddings", json={"input": ""}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"  # the engine's


def test_an_embedding_goes_to_the_idle_replica(fleet: tuple[Process, list[Process]]) -> None:
    router, [busy, idle] = fleet
    body = {"prompt": "paged attention", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    readers = []  # (kept: a reader collected closes its stream, and the engine aborts it)
    with contextlib.ExitStack() as streams:
        for _ in range(BUSY_STREAMS):  # straight to one engine: the router learns of them by load
            url = f"{busy.url}/v1/completions"
            stream = streams.enter_context(httpx.stream("POST", url, json=body, timeout=60))
            readers.append(stream.iter_lines())
            next(readers[-1])  # it is generating
        # The router reads each engine's running requests from its /metrics.
        wait_until(lambda: replica_view(router)[busy.url]["queued_tokens"] >= BUSY_STREAMS * 16)
        for _ in range(3):
            answer = httpx.post(f"{router.url}/v1/embeddings", json={"input": TEXTS}, timeout=60)
            assert answer.status_code == 200, answer.text
            assert answer.headers[REPLICA_HEADER] == idle.url


def test_a_killed_replica_is_failed_over(fleet: tuple[Process, list[Process]]) -> None:
    router, replicas = fleet
    replicas[0].kill()
    for _ in range(4):  # whichever the router tries first, the survivor answers
        answer = httpx.post(f"{router.url}/v1/embeddings", json={"input": TEXTS}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.headers[REPLICA_HEADER] == replicas[1].url
