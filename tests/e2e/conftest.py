"""Fixtures of the e2e scenarios (`make e2e`, marker `e2e`): a pod network, a node cache, and a
running cluster per scenario; everything made is removed at the end, pass or fail."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.cluster import Cluster, running_cluster
from tests.e2e.kubelet import prepare_node_cache
from tests.e2e.netns import PodNetwork, can_make_namespaces
from tests.e2e.runtime import CHECKOUT, REPO, ProcessRuntime, Runtime

NODE_CACHE = Path("/var/tmp/pagedock-e2e-cache")
# Probe periods, back-offs and grace periods run at this fraction of the spec's seconds.
TIME_SCALE = 0.2
# Mount points the pods' volumes need on the host root (made once, removed when empty).
MOUNT_POINTS = (Path("/cache"), Path("/run/pagedock-e2e"), Path("/run/pagedock-e2e/serviceaccount"))


@pytest.fixture(scope="session")
def node_cache(smollm2_gguf_path: Path) -> Path:
    """The node's warm cache: kept between runs (the first engine start fills it: ~1 min)."""
    reason = can_make_namespaces()
    if reason:
        pytest.skip(f"e2e {reason}")
    prepare_node_cache(NODE_CACHE, smollm2_gguf_path)
    return NODE_CACHE


@pytest.fixture(scope="session")
def mount_points() -> Iterator[None]:
    made = [p for p in MOUNT_POINTS if not p.exists()]
    for path in made:
        path.mkdir(parents=True)
    yield
    for path in reversed(made):
        with contextlib.suppress(OSError):
            path.rmdir()


@pytest.fixture()
def network() -> Iterator[PodNetwork]:
    network = PodNetwork()
    try:
        network.open()
        yield network
    finally:
        network.close()


@pytest.fixture(scope="session")
def exposed_checkout() -> Iterator[None]:
    """This checkout bind-mounted at CHECKOUT for the session (see runtime.py)."""
    reason = can_make_namespaces()
    if reason:
        pytest.skip(f"e2e {reason}")
    # A run killed before its teardown (a CI job cut short) leaves its mount behind, possibly of
    # a checkout deleted since: mounting over that fails, so it goes first.
    subprocess.run(["umount", "--lazy", str(CHECKOUT)], check=False, capture_output=True)
    CHECKOUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(REPO), str(CHECKOUT)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(CHECKOUT)], check=False)
        with contextlib.suppress(OSError):
            CHECKOUT.rmdir()


@pytest.fixture()
def runtime(tmp_path: Path, exposed_checkout: None) -> Runtime:
    return ProcessRuntime(tmp_path / "etc")


@pytest_asyncio.fixture()
async def cluster(
    network: PodNetwork, runtime: Runtime, node_cache: Path, mount_points: None
) -> AsyncIterator[Cluster]:
    workdir = Path(f"/var/tmp/pagedock-e2e-{network.run_id}")
    workdir.mkdir(parents=True)
    try:
        async with running_cluster(network, runtime, workdir, node_cache, TIME_SCALE) as cluster:
            try:
                yield cluster
            finally:
                print(cluster.logs())
                keep = os.environ.get("PAGEDOCK_E2E_KEEP_LOGS")  # a folder: every pod's whole log
                if keep:
                    shutil.copytree(
                        workdir / "pods",
                        Path(keep) / network.run_id,
                        ignore=shutil.ignore_patterns("volumes"),
                        dirs_exist_ok=True,
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
