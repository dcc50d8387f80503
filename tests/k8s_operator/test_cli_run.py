"""`pagedock operator run` itself, as a subprocess, against kmock (no kopf.testing.KopfRunner)."""

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from tests.k8s_operator.conftest import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD_COLLECTION, live, make_llmd, send

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture()
async def standalone(cluster: Emulator) -> AsyncIterator[asyncio.subprocess.Process]:
    """`pagedock operator run -A --standalone` with the chart's environment (peering name set)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "operator")]),
        "PAGEDOCK_OPERATOR_PEERING": "pagedock",
        "PAGEDOCK_OPERATOR_LIVENESS_PORT": "0",
        "PAGEDOCK_OPERATOR_SCRAPE_METRICS": "false",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pagedock", "operator", "run", "-A", "--standalone",
        env=env, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), timeout=20)
        except TimeoutError:
            process.kill()
            await process.wait()


async def test_standalone_runs_without_the_peering_crd(
    standalone: asyncio.subprocess.Process, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    assert not any(key.startswith("kopf.dev/") for key in map(str, cluster.resources))
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    try:
        await eventually(lambda: live(cluster, "apps/v1/deployments", "chat-engine"), timeout=30)
    except AssertionError:
        standalone.send_signal(signal.SIGINT)
        await standalone.wait()
        stderr = await standalone.stderr.read() if standalone.stderr else b""
        raise AssertionError(stderr.decode()[-3000:]) from None
