"""The router's web view on a live fleet: `pagedock route` (with an API key) in front of two
`pagedock serve` replicas of the tiny model. The JSON state lists both replicas, and a request
with a new long prefix adds a group of blocks on the replica that served it (and a second turn
of it joins that group there); the page, in Debian's headless Chromium, shows both replicas and
draws the new group on its cache map, and leaves a screenshot (PAGEDOCK_TEST_ARTIFACTS)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from pagedock.text.tokenizer import Tokenizer
from router.http.proxy import REPLICA_HEADER
from tests.eventually import eventually
from tests.headless_chromium import INSTALL_HINT, HeadlessChromium, artifacts_dir, find_chromium
from tests.router.live import Process, replica_process, router_process, system_prompt, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.asyncio]
KEY = "dashboard-test-key"
NUM_KV_BLOCKS = 96
PREFIX_TOKENS = 160  # ten blocks of 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_model import make_tiny_llama_dir

    return make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def fleet(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    """The router, once both replicas are healthy and their KV snapshots applied."""
    logs = tmp_path_factory.mktemp("logs")
    replicas = [replica_process(model_dir, logs, NUM_KV_BLOCKS) for _ in range(2)]
    router = router_process(model_dir, logs, [r.url for r in replicas], "--api-key", KEY)
    try:
        for p in replicas:
            p.start()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda p: p.wait_ready(timeout_s=180), replicas))
        router.start().wait_ready(timeout_s=60)
        wait_synced_with_key(router, [r.url for r in replicas])
        yield router
    finally:
        for p in (router, *replicas):
            p.kill()


def wait_synced_with_key(router: Process, urls: list[str]) -> None:
    """Every replica healthy and its KV snapshot applied, as the dashboard's state says."""

    def synced() -> bool:
        replicas = state(router)["replicas"]
        return {r["url"] for r in replicas if r["healthy"] and r["kv_synced"]} >= set(urls)

    wait_until(synced, timeout_s=30)


def headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def state(router: Process) -> dict[str, Any]:
    response = httpx.get(router.url + "/dashboard/state", headers=headers(), timeout=10)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def groups_on(snapshot: dict[str, Any]) -> dict[str, dict[str, int]]:
    """replica -> {prefix: blocks}."""
    return {r["url"]: {g["prefix"]: g["blocks"] for g in r["groups"]} for r in snapshot["replicas"]}


def new_prefix(model_dir: Path, seed: int) -> str:
    tokenizer = Tokenizer.from_hf_dir(model_dir)
    return system_prompt(tokenizer, random.Random(seed), PREFIX_TOKENS)


async def chat(router: Process, system: str, question: str) -> tuple[str, dict[str, Any]]:
    """Send one turn; the replica that served it and the router's decision for it (the state is
    up to half a second old: it is waited for)."""
    num_before = state(router)["num_decisions"]
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 2,
    }
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            router.url + "/v1/chat/completions", json=body, headers=headers()
        )
    assert response.status_code == 200, response.text
    replica = response.headers[REPLICA_HEADER]

    def decided() -> dict[str, Any] | None:
        snapshot = state(router)
        newest = snapshot["decisions"][0] if snapshot["decisions"] else None
        if snapshot["num_decisions"] > num_before and newest and newest["replica"] == replica:
            return newest
        return None

    decision = await eventually(decided, 10, f"a decision for {replica} in /dashboard/state")
    assert decision["prefix"] is not None
    return replica, decision


async def test_the_state_lists_both_replicas_and_a_new_prefix_adds_a_group_where_it_went(
    fleet: Process, model_dir: Path
) -> None:
    before = state(fleet)
    assert len(before["replicas"]) == 2
    assert all(r["healthy"] and r["kv_synced"] for r in before["replicas"])
    system = new_prefix(model_dir, seed=1)
    served, decision = await chat(fleet, system, "first question")
    prefix = decision["prefix"]
    assert all(prefix not in g for g in groups_on(before).values())
    min_blocks = decision["num_prompt_tokens"] // before["replicas"][0]["block_size"]

    def placed() -> dict[str, dict[str, int]] | None:
        seen = groups_on(state(fleet))
        return seen if seen[served].get(prefix, 0) >= min_blocks else None

    seen = await eventually(placed, 30, lambda: f"{prefix} on {served}: {groups_on(state(fleet))}")
    other = next(url for url in seen if url != served)
    assert prefix not in seen[other]
    # The conversation's next turn goes where its prefix is, and its blocks join the group there.
    again, second = await chat(fleet, system, "a second, longer question about the same thing")
    assert (again, second["prefix"], second["reason"]) == (served, prefix, "affinity")
    assert second["predicted_cached_tokens"] >= PREFIX_TOKENS - 16  # the system prompt's blocks
    assert second["candidates"][0]["replica"] == served


async def test_the_page_in_a_real_browser_shows_the_fleet_and_draws_a_new_prefix(
    fleet: Process, model_dir: Path, tmp_path: Path
) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.fail(INSTALL_HINT)
    async with HeadlessChromium(chromium, tmp_path / "profile", tmp_path / "chromium.log") as page:
        await page.open(f"{fleet.url}/dashboard#key={KEY}")
        seen: dict[str, Any] = {}

        async def dom() -> dict[str, Any]:
            seen.update(await page.evaluate(DOM_STATE))
            return seen

        await eventually(
            lambda: _live_with(dom, 2), 30, lambda: f"the page showed {seen} (want 2 replicas)"
        )
        assert "#key" not in seen["url"]  # the key left the address bar
        served, decision = await chat(fleet, new_prefix(model_dir, seed=2), "hello")
        prefix = decision["prefix"]

        async def drawn() -> bool:
            cards = (await dom())["cards"]
            return prefix in cards.get(served, "") and all(
                prefix not in groups for url, groups in cards.items() if url != served
            )

        await eventually(drawn, 30, lambda: f"{prefix} not drawn on {served}: {seen}")
        shot = await page.screenshot(artifacts_dir() / f"dashboard-{int(time.time())}.png")
    print(f"screenshot of the web view: {shot}")
    assert shot.stat().st_size > 10_000


async def _live_with(dom: Any, num_replicas: int) -> bool:
    state = await dom()
    return bool(state["state"] == "live" and state.get("replicas") == str(num_replicas))


# What the page shows, from the data attributes it sets (router/dashboard/dashboard.html).
DOM_STATE = """(() => {
  // The body's attributes exist before the rest of the page is parsed: wait for all of it.
  const body = document.body;
  if (document.readyState === "loading" || !body || !body.dataset.state) {
    return { url: location.href, state: "loading", cards: {} };
  }
  return {
    url: location.href,
    state: body.dataset.state,
    replicas: body.dataset.replicas,
    updates: body.dataset.updates,
    message: document.getElementById("message").textContent,
    cards: Object.fromEntries([...document.querySelectorAll(".map[data-replica]")].map(
      (c) => [c.dataset.replica, c.dataset.groups || ""])),
  };
})()"""
