"""How the kubelet stand-in stops a container whose process is still being spawned, or whose pod
task is cancelled (runs in `make test`): no process outlives its container."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.container import ContainerRunner
from tests.e2e.podspec import ImageConfig
from tests.e2e.runtime import Launch

pytestmark = pytest.mark.asyncio
IMAGE = ImageConfig([], ["sleep", "60"], {}, (0, 0), "/")


class SlowStartRuntime:
    """Spawns `sleep 60` after `delay_s`, as a runtime busy setting up a container would."""

    name = "slow"
    uses_node_cache = False

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.started = asyncio.Event()
        self.processes: list[asyncio.subprocess.Process] = []

    def pull(self, image: str) -> ImageConfig:
        return IMAGE

    async def start(self, launch: Launch) -> asyncio.subprocess.Process:
        self.started.set()
        await asyncio.sleep(self.delay_s)
        process = await asyncio.create_subprocess_exec(*launch.argv, start_new_session=True)
        self.processes.append(process)
        return process

    def remove(self, container_id: str) -> None:
        pass


def runner(runtime: SlowStartRuntime, tmp_path: Path) -> ContainerRunner:
    def configure(container: dict[str, Any], image: ImageConfig) -> Launch:
        return Launch("c", "ns", "img", ["sleep", "60"], {}, [], (0, 0), "/", tmp_path / "c.log")

    async def on_change() -> None:
        pass

    return ContainerRunner({"name": "c", "image": "img"}, runtime, configure, on_change, 0.01, "")


async def test_a_container_stopped_while_it_spawns_kills_the_process_it_spawned(
    tmp_path: Path,
) -> None:
    runtime = SlowStartRuntime(delay_s=0.3)
    container = runner(runtime, tmp_path)
    task = asyncio.create_task(container.run())
    await runtime.started.wait()
    await container.stop(grace_s=1.0)  # no process yet: it only marks the container stopping
    await asyncio.wait_for(task, 5)
    [process] = runtime.processes
    assert process.returncode is not None
    assert container.restart_count == 0


async def test_a_cancelled_pod_task_leaves_no_process_behind(tmp_path: Path) -> None:
    runtime = SlowStartRuntime(delay_s=0.0)
    container = runner(runtime, tmp_path)
    task = asyncio.create_task(container.run())
    while not runtime.processes:
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    [process] = runtime.processes
    await asyncio.wait_for(process.wait(), 5)
    assert process.returncode is not None
