"""vLLM's own router (`vllm-router` 0.1.17, PyPI) in front of two `pagedock serve` engines of the
tiny model, as separate processes: round_robin alternates; cache_aware (pagedock's render
endpoints) and kv_aware (pagedock's ZMQ KV events in vLLM's format) send a follow-up to the
replica that holds its prefix. Which replica served a request is read from the engines' own
`vllm:request_success_total`; a prefix hit from the response's usage.

kv_aware has no counter of what it indexed, so a test that needs the index current waits for a
decision of its own: a fresh canary prompt sent straight to an engine, then through the router,
until the router's debug log credits that engine with the canary's blocks. One engine's events
are applied in order, so everything the engine published before the canary is indexed then."""

from __future__ import annotations

import itertools
import random
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from benchmarks.vllm_router_fleet import EngineEvents, VllmRouter
from pagedock.text.tokenizer import Tokenizer
from tests.eventually import eventually_sync
from tests.router.live import (
    Process,
    free_port,
    metric_sum,
    replica_process,
    system_prompt,
    vllm_events,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
BLOCK_SIZE = 16
PREFIX_BLOCKS = 10
PREFIX_TOKENS = PREFIX_BLOCKS * BLOCK_SIZE
SUCCESS = "vllm:request_success_total"
DECISION = re.compile(r'KV prefix decision .*?worker="([^"]+)".*?credited_prefix_tokens=(\d+)')


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_model import make_tiny_llama_dir

    return make_tiny_llama_dir(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_hf_dir(model_dir)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="module")
def engines(model_dir: Path, logs: Path) -> Iterator[tuple[list[Process], list[EngineEvents]]]:
    """Two engines publishing vLLM's ZMQ KV events (with replay), room for every prefix here."""
    procs = [replica_process(model_dir, logs, 400) for _ in range(2)]
    events = []
    for p in procs:
        ports = [int(x) for x in vllm_events(p).split(":")]
        events.append(EngineEvents(p.url, ports[0], ports[1]))
    try:
        for p in procs:
            p.start()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda p: p.wait_ready(), procs))
        yield procs, events
    finally:
        for p in procs:
            p.kill()


@pytest.fixture
def start_router(
    engines: tuple[list[Process], list[EngineEvents]], logs: Path
) -> Iterator[Callable[[str], VllmRouter]]:
    """Start vllm-router with a policy in front of the engines; killed at the test's end."""
    started: list[VllmRouter] = []

    def start(policy: str) -> VllmRouter:
        procs, events = engines
        router = VllmRouter(
            policy,
            [p.url for p in procs],
            model="tiny",
            log=logs / f"vllm-router-{policy}-{len(started)}.log",
            port=free_port(),
            metrics_port=free_port(),
            events=events,
            block_size=BLOCK_SIZE,
            log_level="debug",  # kv_aware's decisions, which the canary waits for
        )
        started.append(router)
        return router.start().wait_ready()

    yield start
    for router in started:
        router.kill()


def complete(url: str, prompt: str) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    response = httpx.post(url + "/v1/completions", json=body, timeout=60.0)
    assert response.status_code == 200, response.text
    return response.json()


def routed(router: VllmRouter, replicas: list[Process], prompt: str) -> tuple[int, int]:
    """Send `prompt` through the router: (index of the replica that served it, cached tokens)."""
    before = [metric_sum(r.url, SUCCESS) for r in replicas]
    usage = complete(router.url, prompt)["usage"]

    def served() -> list[int]:
        return [i for i, r in enumerate(replicas) if metric_sum(r.url, SUCCESS) > before[i]]

    [index] = eventually_sync(served, timeout=10, what="an engine counting the request")
    return index, usage["prompt_tokens_details"]["cached_tokens"]


def prefix(tokenizer: Tokenizer, seed: int) -> str:
    """A long shared prefix no other test sends (the engines live for the module)."""
    return system_prompt(tokenizer, random.Random(seed), PREFIX_TOKENS + BLOCK_SIZE)


def decisions(router: VllmRouter) -> list[tuple[str, int]]:
    return [(m[1], int(m[2])) for m in DECISION.finditer(router.log_text())]


def wait_indexed(router: VllmRouter, engine: Process, tokenizer: Tokenizer, seed: int) -> None:
    """Until kv_aware credits `engine` with a canary sent straight to it (module docstring)."""
    rng = random.Random(seed)

    def canary_credited() -> bool:
        canary = system_prompt(tokenizer, rng, 3 * BLOCK_SIZE) + " canary"
        complete(engine.url, canary)
        seen = len(decisions(router))
        complete(router.url, canary + " probe")
        return any(url == engine.url and n > 0 for url, n in decisions(router)[seen:])

    eventually_sync(
        canary_credited, timeout=30, what=lambda: f"decisions: {decisions(router)[-3:]}"
    )


def test_round_robin_alternates_replicas(start_router, engines, tokenizer) -> None:
    replicas, _ = engines
    router = start_router("round_robin")
    shared = prefix(tokenizer, 1)
    served = [routed(router, replicas, f"{shared} question {i}") for i in range(4)]
    order = [index for index, _ in served]
    assert all(a != b for a, b in itertools.pairwise(order)), order
    # The first follow-up went to the other replica, which had never seen the prefix.
    assert served[1][1] == 0, served


def test_cache_aware_sends_follow_ups_to_the_replica_that_served_the_first(
    start_router, engines, tokenizer
) -> None:
    """A prefix it has not seen goes to the least-loaded replica (the first on a tie), so the
    second group's first request is sent while a long request keeps the first replica busy: the
    two groups start on different replicas, and each group's follow-up must find its own."""
    replicas, _ = engines
    router = start_router("cache_aware")
    groups = [prefix(tokenizer, 2), prefix(tokenizer, 3)]
    homes = [routed(router, replicas, f"{groups[0]} question 0")[0]]
    with busy(router):
        homes.append(routed(router, replicas, f"{groups[1]} question 0")[0])
    assert homes[0] != homes[1], homes
    for group, home in zip(groups, homes, strict=True):
        index, cached = routed(router, replicas, f"{group} question 1")
        assert index == home
        assert cached >= PREFIX_TOKENS


@contextmanager
def busy(router: VllmRouter) -> Iterator[None]:
    """A long streamed request (480 tokens: seconds on the tiny model) in flight through the
    router for the body of the block; it started once its first chunk has arrived."""
    started, done = threading.Event(), threading.Event()
    body = {
        "model": "tiny",
        "prompt": "busy",
        "max_tokens": 480,
        "ignore_eos": True,
        "stream": True,
    }

    def stream() -> None:
        with httpx.stream("POST", router.url + "/v1/completions", json=body, timeout=60) as r:
            for _ in r.iter_lines():
                started.set()
        done.set()

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    assert started.wait(30), "the long request never started streaming"
    yield
    assert not done.is_set(), "the long request ended too soon to keep its replica busy"
    thread.join(60)


def test_kv_aware_sends_a_follow_up_to_the_replica_that_served_the_first(
    start_router, engines, tokenizer
) -> None:
    replicas, _ = engines
    router = start_router("kv_aware")
    shared = prefix(tokenizer, 4)
    home, _ = routed(router, replicas, f"{shared} question 0")
    wait_indexed(router, replicas[home], tokenizer, seed=40)
    index, cached = routed(router, replicas, f"{shared} question 1")
    assert index == home
    assert cached >= PREFIX_TOKENS


def test_kv_aware_routes_by_the_blocks_each_engine_published(
    start_router, engines, tokenizer
) -> None:
    """Each replica is warmed directly, never through the router: only its KV events can tell
    the router where a prefix is."""
    replicas, _ = engines
    router = start_router("kv_aware")
    groups = [prefix(tokenizer, 5), prefix(tokenizer, 6)]
    for group, replica in zip(groups, replicas, strict=True):
        complete(replica.url, f"{group} warm-up")
    for i, replica in enumerate(replicas):
        wait_indexed(router, replica, tokenizer, seed=50 + i)
    for home, group in enumerate(groups):
        index, cached = routed(router, replicas, f"{group} question")
        assert index == home
        assert cached >= PREFIX_TOKENS
