"""Fixtures: a stateful Kubernetes emulator (kmock) and the operator running against it."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kopf.testing import KopfRunner
from llm_operator.controller.handlers import make_registry
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import RESOURCES, Emulator
from tests.kubeconfig import write_kubeconfig


@pytest.fixture()
def kmock_options() -> dict[str, Any]:
    return {"cls": Emulator}


@pytest.fixture()
def cluster(kmock: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Emulator:
    """The emulator, its resources declared, and KUBECONFIG pointing at it."""
    for resource, info in RESOURCES.items():
        kmock.resources[resource] = info
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return kmock


@pytest.fixture()
def operator_settings() -> OperatorSettings:
    return OperatorSettings(
        image_repository="registry.test",
        image_tag="1",
        resync_seconds=1.0,
        scrape_metrics=False,
        peering_name="",
        liveness_port=0,
        metrics_port=0,
    )


@pytest_asyncio.fixture()
async def operator(
    cluster: Emulator, operator_settings: OperatorSettings
) -> AsyncIterator[KopfRunner]:
    """The operator, cluster-wide and standalone, in a background thread (kopf's KopfRunner)."""
    runner = KopfRunner(
        ["run", "--all-namespaces", "--standalone"],
        registry=make_registry(operator_settings),
        timeout=30,
    )
    runner.__enter__()
    try:
        yield runner
    finally:
        # NOTE: the emulator serves on this loop, so the thread must be joined off-loop.
        await asyncio.to_thread(runner.__exit__, None, None, None)


@pytest_asyncio.fixture()
async def api(cluster: Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=str(cluster.url)) as session:
        yield session
