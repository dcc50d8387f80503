"""One container of a pod, as a kubelet runs it: pull (ErrImagePull, ImagePullBackOff), configure
(CreateContainerConfigError), start, probe (startup, then readiness and liveness), and restart
with back-off when it exits (restartCount, lastState.terminated, CrashLoopBackOff). Its state is
rendered as a `containerStatuses[]` entry; every change calls `on_change`."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tests.e2e.podspec import ContainerConfigError, ImageConfig, Probe, probes
from tests.e2e.runtime import ImagePullError, Launch, Runtime

Obj = dict[str, Any]
logger = logging.getLogger("e2e.kubelet")
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 300.0


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ContainerRunner:
    def __init__(
        self,
        spec: Obj,
        runtime: Runtime,
        configure: Callable[[Obj, ImageConfig], Launch],
        on_change: Callable[[], Awaitable[None]],
        time_scale: float,
        pod_ip: str,
    ) -> None:
        self.spec = spec
        self.pod_ip = pod_ip
        self.runtime = runtime
        self.configure = configure
        self.on_change = on_change
        self.time_scale = time_scale
        self.restart_count = 0
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: Obj = {}
        self.started = False
        self.ready = False
        self.process: asyncio.subprocess.Process | None = None
        self.stopping = False
        self.deleting = False
        """The pod's deletion was requested (its preStop may still run): as the kubelet's prober
        does (pkg/kubelet/prober/worker.go), no liveness or startup probe kills it any more, even
        once its server stops accepting (a router or engine draining in its grace period)."""
        self._pull_failures = 0
        self._probes: list[Probe] = []

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> Obj:
        return {
            "name": self.name,
            "image": self.spec["image"],
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }

    async def run(self) -> None:
        """Until `stop()`: start, wait for the exit, back off, start again (restartPolicy
        Always)."""
        while not self.stopping:
            launch = await self._prepare()
            if launch is None:
                continue
            exit_code = await self._run_once(launch)
            if self.stopping:
                return
            self.restart_count += 1
            await self._back_off("CrashLoopBackOff", exit_code)

    async def _prepare(self) -> Launch | None:
        """The resolved launch, or None after reporting why it can't start (and backing off)."""
        try:
            image = self.runtime.pull(self.spec["image"])
        except ImagePullError as e:
            self._pull_failures += 1
            await self._set_waiting("ErrImagePull", str(e))
            await self._sleep(self._backoff_s(self._pull_failures))
            await self._set_waiting(
                "ImagePullBackOff", f'Back-off pulling image "{self.spec["image"]}"'
            )
            await self._sleep(self._backoff_s(self._pull_failures))
            return None
        try:
            self._probes = probes(self.spec, self.time_scale)
            return self.configure(self.spec, image)
        except ContainerConfigError as e:
            await self._set_waiting("CreateContainerConfigError", str(e))
            await self._sleep(self._backoff_s(1))
            return None

    async def _run_once(self, launch: Launch) -> int:
        try:
            self.process = await self.runtime.start(launch)
        except (OSError, subprocess.CalledProcessError) as e:
            await self._set_waiting("RunContainerError", f"failed to start the container: {e}")
            return 128

        if self.stopping:  # stop() came while the process was being spawned
            self.kill()
            await self.process.wait()
            return 137
        started_at = now()
        try:
            returncode = await self._watch(started_at)
        except asyncio.CancelledError:
            self.kill()  # a cancelled pod task leaves no process behind
            raise
        exit_code = returncode if returncode >= 0 else 128 - returncode
        reason = "Completed" if exit_code == 0 else "Error"
        self.last_state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started_at,
                "finishedAt": now(),
                "containerID": f"e2e://{launch.container_id}",
            }
        }
        self.ready = self.started = False
        self.state = {"terminated": self.last_state["terminated"]}
        await self.on_change()
        return exit_code

    async def _watch(self, started_at: str) -> int:
        """Running: report it, probe, and wait for the process to exit."""
        assert self.process is not None
        self.state = {"running": {"startedAt": started_at}}
        self.started = False
        await self.on_change()
        probing = asyncio.create_task(self._probe(self._probes))
        try:
            return await self.process.wait()
        finally:
            probing.cancel()
            await asyncio.gather(probing, return_exceptions=True)

    async def _back_off(self, reason: str, exit_code: int) -> None:
        delay_s = self._backoff_s(self.restart_count)
        message = (
            f"back-off {int(delay_s / self.time_scale)}s restarting failed container={self.name}"
        )
        await self._set_waiting(reason, f"{message} (exit code {exit_code})")
        await self._sleep(delay_s)

    def _backoff_s(self, failures: int) -> float:
        return min(BACKOFF_BASE_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S) * self.time_scale

    async def _set_waiting(self, reason: str, message: str) -> None:
        self.state = {"waiting": {"reason": reason, "message": message}}
        self.ready = False
        await self.on_change()

    async def _sleep(self, seconds: float) -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        while not self.stopping and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)

    # ---- probes ------------------------------------------------------------------------------

    async def _probe(self, found: list[Probe]) -> None:
        by_kind = {probe.kind: probe for probe in found}
        host = self.pod_ip
        async with aiohttp.ClientSession() as http:
            if "startup" in by_kind and not await self._until_healthy(
                http, host, by_kind["startup"]
            ):
                if not self.deleting:
                    self.kill("startup probe failed")
                return
            self.started = True
            if "readiness" not in by_kind:
                self.ready = True
            await self.on_change()
            loops = [self._readiness(http, host, by_kind.get("readiness"))]
            loops.append(self._liveness(http, host, by_kind.get("liveness")))
            await asyncio.gather(*loops)

    async def _until_healthy(self, http: aiohttp.ClientSession, host: str, probe: Probe) -> bool:
        await asyncio.sleep(probe.initial_delay_s)
        for _ in range(probe.failure_threshold):
            if await _http_ok(http, host, probe):
                return True
            await asyncio.sleep(probe.period_s)
        return False

    async def _readiness(self, http: aiohttp.ClientSession, host: str, probe: Probe | None) -> None:
        if probe is None:
            return
        await asyncio.sleep(probe.initial_delay_s)
        failures = 0
        while True:
            ok = await _http_ok(http, host, probe)
            failures = 0 if ok else failures + 1
            ready = ok or (self.ready and failures < probe.failure_threshold)
            if ready != self.ready:
                self.ready = ready
                await self.on_change()
            await asyncio.sleep(probe.period_s)

    async def _liveness(self, http: aiohttp.ClientSession, host: str, probe: Probe | None) -> None:
        if probe is None:
            return
        await asyncio.sleep(probe.initial_delay_s)
        failures = 0
        while failures < probe.failure_threshold:
            await asyncio.sleep(probe.period_s)
            if self.deleting:
                return
            failures = 0 if await _http_ok(http, host, probe) else failures + 1
        if not self.deleting:
            self.kill("liveness probe failed")

    def kill(self, why: str = "", sig: int = signal.SIGKILL) -> None:
        """Signal the container's process group (what a failed probe or `kill` does)."""
        if why:
            logger.info("killing container %s: %s", self.name, why)
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after `grace_s` (pod deletion)."""
        self.stopping = True
        if self.process is None or self.process.returncode is not None:
            return
        self.kill(sig=signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), grace_s)
        except TimeoutError:
            self.kill()
            await self.process.wait()


async def _http_ok(http: aiohttp.ClientSession, host: str, probe: Probe) -> bool:
    url = f"http://{host}:{probe.port}{probe.path}"
    try:
        timeout = aiohttp.ClientTimeout(total=probe.timeout_s)
        async with http.get(url, timeout=timeout, allow_redirects=False) as response:
            return 200 <= response.status < 400
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
