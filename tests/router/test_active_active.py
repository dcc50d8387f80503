"""Two routers, active-active, in front of the same replicas: each builds its cache view from the
replicas' own event streams (no shared store), so both place a tenant's request on the replica
that holds its prefix, and killing one loses nothing for the other's clients."""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Iterator

import httpx
import pytest

from router.http.proxy import REPLICA_HEADER
from tests.router.live import (
    WORDS,
    Process,
    replica_process,
    replica_view,
    router_process,
    running_fleet,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[Process], list[Process]]]:
    from tests.tiny_model import make_tiny_llama_dir

    model, logs = (
        make_tiny_llama_dir(tmp_path_factory.mktemp("tiny")),
        tmp_path_factory.mktemp("logs"),
    )
    replicas = [replica_process(model, logs, 128) for _ in range(2)]
    routers = [router_process(model, logs, [r.url for r in replicas]) for _ in range(2)]
    with running_fleet(routers, replicas):
        yield routers, replicas


def tenant_prompts(seed: int, tenants: int) -> list[str]:
    """One long shared prefix per tenant (several KV blocks), so placement follows the cache."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=60)) for _ in range(tenants)]


def served_by(router: Process, prompt: str) -> str:
    response = httpx.post(
        router.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.headers[REPLICA_HEADER]


def test_both_routers_send_a_tenant_to_the_replica_holding_its_prefix(
    fleet: tuple[list[Process], list[Process]],
) -> None:
    (a, b), _ = fleet
    for i, prompt in enumerate(tenant_prompts(seed=11, tenants=6)):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        before = {url: view["cached_blocks"] for url, view in replica_view(second).items()}
        holder = served_by(first, prompt + " first turn")
        # The other router learns of the blocks from the replica's events, not from its peer.
        wait_until(lambda: replica_view(second)[holder]["cached_blocks"] > before[holder])  # noqa: B023
        assert served_by(second, prompt + " second turn") == holder


def test_killing_one_router_loses_nothing_for_the_others_clients(
    fleet: tuple[list[Process], list[Process]],
) -> None:
    (a, b), _ = fleet
    statuses: list[int] = []
    stop = threading.Event()

    def client_of_b() -> None:
        rng = random.Random(5)
        while not stop.is_set():
            prompt = " ".join(rng.choices(WORDS, k=30))
            body = {"prompt": prompt, "max_tokens": 4}
            statuses.append(
                httpx.post(b.url + "/v1/completions", json=body, timeout=60).status_code
            )

    client = threading.Thread(target=client_of_b)
    client.start()
    wait_until(lambda: len(statuses) >= 5, timeout_s=30)
    a.kill(signal.SIGKILL)
    count = len(statuses)
    wait_until(lambda: len(statuses) >= count + 10, timeout_s=60)
    stop.set()
    client.join(60)
    assert statuses == [200] * len(statuses)
