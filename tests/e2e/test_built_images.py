"""Scenario 1 with the built images: the operator, router and engine pods run from
`localhost/pagedock/{operator,router,engine-cpu}:dev` with `buildah run` in their network
namespaces (skipped when the images are absent: build them first)."""

from __future__ import annotations

import pytest

from tests.e2e.cluster import Cluster, chat
from tests.e2e.runtime import ENGINE_IMAGE, OPERATOR_IMAGE, ROUTER_IMAGE, BuildahRuntime, Runtime

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]


@pytest.fixture()
def runtime() -> Runtime:
    missing = BuildahRuntime.missing_images(ENGINE_IMAGE, ROUTER_IMAGE, OPERATOR_IMAGE)
    if missing:
        pytest.skip(f"images not built: {', '.join(missing)}")
    return BuildahRuntime()


async def test_the_built_images_serve_the_example_through_the_router(cluster: Cluster) -> None:
    await cluster.apply_example()
    await cluster.wait_ready("default", "smollm2", timeout=600)
    [router] = cluster.kubelet.pods("smollm2-router-")
    reply = await chat(router.ip, 8080)
    assert reply["choices"][0]["message"]["content"]
