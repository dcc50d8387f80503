"""`pagedock operator run` itself, as a subprocess, against kmock (no kopf.testing.KopfRunner)."""

import asyncio
import datetime
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
import pytest_asyncio

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD_COLLECTION, live, make_llmd, send

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = "apps/v1/deployments"
PEERINGS = "kopf.dev/v1/clusterkopfpeerings"
PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings"


async def start_operator(*args: str) -> asyncio.subprocess.Process:
    """`pagedock operator run ARGS` with the chart's environment (peering name set)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "operator")]),
        "PAGEDOCK_OPERATOR_PEERING": "pagedock",
        "PAGEDOCK_OPERATOR_LIVENESS_PORT": "0",
        "PAGEDOCK_OPERATOR_SCRAPE_METRICS": "false",
        "PAGEDOCK_OPERATOR_RESYNC_SECONDS": "1",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pagedock",
        "operator",
        "run",
        *args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def stop(process: asyncio.subprocess.Process) -> str:
    """SIGINT, wait, and the operator's log."""
    if process.returncode is None:
        process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), timeout=20)
    except TimeoutError:
        process.kill()
        await process.wait()
    return (await process.stderr.read()).decode() if process.stderr else ""


async def wait_or_show_log(process: asyncio.subprocess.Process, check: Any) -> None:
    try:
        await eventually(check, timeout=30)
    except AssertionError:
        raise AssertionError((await stop(process))[-3000:]) from None


@pytest_asyncio.fixture()
async def standalone(cluster: Emulator) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await start_operator("-A", "--standalone")
    try:
        yield process
    finally:
        await stop(process)


async def test_standalone_runs_without_the_peering_crd(
    standalone: asyncio.subprocess.Process, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    assert not any(key.startswith("kopf.dev/") for key in map(str, cluster.resources))
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    await wait_or_show_log(standalone, lambda: live(cluster, DEPLOYMENTS, "chat-engine"))


async def test_with_peering_the_leader_handles_events_and_resyncs(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    cluster.resources[PEERINGS] = kmock.ResourceInfo(
        kind="ClusterKopfPeering",
        namespaced=False,
        verbs={"list", "watch", "get", "patch", "create"},
    )
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "pagedock"},
    }
    await send(api, "POST", PEERING_PATH, peering)
    process = await start_operator("-A")
    try:
        await send(api, "POST", LLMD_COLLECTION, make_llmd())
        await wait_or_show_log(process, lambda: live(cluster, DEPLOYMENTS, "chat-engine"))
        status = cluster.objects[PEERINGS, None, "pagedock"].raw.get("status") or {}
        assert len(status) == 1, status  # this replica, under the identity the CLI chose
        # A ConfigMap has no watch: only the resync pass, which runs on the leader, restores it.
        await send(api, "DELETE", "/api/v1/namespaces/team-a/configmaps/chat-engine")
        await wait_or_show_log(process, lambda: live(cluster, "v1/configmaps", "chat-engine"))
        # A live peer of a higher priority: kopf pauses this replica, and so does the resync pass.
        now = datetime.datetime.now(datetime.UTC).isoformat()
        leader = {"other-replica": {"priority": 2**16, "lifetime": 600, "lastseen": now}}
        await send(api, "PATCH", f"{PEERING_PATH}/pagedock", {"status": leader})
        await asyncio.sleep(2.5)  # more than a resync period: a pass already running ends
        await send(api, "DELETE", "/api/v1/namespaces/team-a/configmaps/chat-engine")
        await asyncio.sleep(3)
        assert live(cluster, "v1/configmaps", "chat-engine") is None
    finally:
        await stop(process)
