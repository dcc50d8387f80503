"""The e2e cluster's teardown cannot hang (runs in `make test`): a step past its deadline is
named and abandoned, the kubelet's loop stops even when a pod's status wakes it in the very turn
it is closed, and a watch whose client never hung up is ended at the API server's shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, cast

import aiohttp
import kmock
import pytest

from tests.e2e.apiserver import ClusterApi
from tests.e2e.cluster import stop_server
from tests.e2e.kubelet import Kubelet
from tests.e2e.teardown import bounded
from tests.eventually import eventually

pytestmark = pytest.mark.asyncio


async def _stubborn(swallowed: asyncio.Event) -> None:
    """Ignores its first cancellation (as `asyncio.wait_for` on Python 3.11 can), not a second."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        swallowed.set()
    await asyncio.Event().wait()


async def test_a_step_past_its_deadline_is_named_and_abandoned() -> None:
    swallowed = asyncio.Event()
    step = asyncio.ensure_future(_stubborn(swallowed))

    with pytest.warns(UserWarning, match=r"(?s)a stubborn step still running.*_stubborn"):
        assert not await bounded(step, 0.05, "a stubborn step")

    await swallowed.wait()  # cancelled once, and still running: abandoned, not awaited
    assert not step.done()
    step.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await step


async def test_a_step_that_finishes_in_time_returns_true_or_raises_its_error() -> None:
    async def fails() -> None:
        raise ValueError("no")

    assert await bounded(asyncio.sleep(0), 5, "a quick step")
    with pytest.raises(ValueError, match="no"):
        await bounded(fails(), 5, "a failing step")


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_the_kubelet_loop_stops_when_woken_in_the_turn_it_is_closed(
    tmp_path: Path, turns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's status published just as the teardown begins (`wake()`, then `turns` turns of
    the loop, then `close()`): the loop's cancellation must not be lost on the way."""
    nothing = cast(Any, None)
    kubelet = Kubelet(nothing, "http://127.0.0.1:9", nothing, nothing, tmp_path, tmp_path)
    synced = asyncio.Event()

    async def sync() -> None:
        synced.set()

    monkeypatch.setattr(kubelet, "sync", sync)
    kubelet.start()
    await synced.wait()  # the loop now waits to be woken
    kubelet.wake()
    for _ in range(turns):
        await asyncio.sleep(0)

    async with asyncio.timeout(5):
        await kubelet.close()

    assert kubelet._task is not None and kubelet._task.done()


async def test_a_watch_still_served_at_shutdown_is_ended_and_named() -> None:
    """Its client never hung up (a FIN lost on the pods' network): the server does not wait
    for it (aiohttp would, 60 s then 60 s more)."""
    async with ClusterApi() as api:
        api.add_namespace("default")
        server = kmock.Server(api, host="127.0.0.1")
        await server.__aenter__()
        url = str(server.url).rstrip("/") + "/api/v1/namespaces/default/pods?watch=true"
        async with aiohttp.ClientSession() as http, http.get(url) as watch:
            await eventually(lambda: api.serving, 10, "the watch being served")

            with pytest.warns(UserWarning, match="served after their clients were gone") as seen:
                async with asyncio.timeout(10):
                    await stop_server(api, server)

            assert "GET /api/v1/namespaces/default/pods?watch=true from 127.0.0.1" in str(
                seen[0].message
            )
            assert not api.serving
            with contextlib.suppress(aiohttp.ClientError):
                async with asyncio.timeout(10):
                    await watch.content.read()  # ended, not left streaming
