"""The kubelet stand-in: one node that runs every Pod in the API as real processes (see pod.py),
plus the controllers kmock lacks (controllers.py) and cluster DNS as per-pod hosts files. One
level-based loop, woken early by pod status changes:

    Deployments ──deployments──> Pods ──PodRunner──> processes in netns ──probes──> Pod status
         ▲ status                                                                       │
         └──────────────── readiness ─── EndpointSlices, hosts ◄─────────────────────────┘
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import warnings
from pathlib import Path

from tests.e2e import controllers
from tests.e2e.apiserver import ClusterApi
from tests.e2e.client import KubeClient
from tests.e2e.netns import PodNetwork
from tests.e2e.pod import PodRunner
from tests.e2e.podspec import Lookup, Obj
from tests.e2e.runtime import Mount, Runtime
from tests.e2e.teardown import bounded
from tests.kubeconfig import write_kubeconfig

logger = logging.getLogger("e2e.kubelet")
KUBELET_TOKEN = "e2e:kubelet"
SYNC_PERIOD_S = 0.5
TEARDOWN_S = 60.0  # every pod's stop
LOOP_STOP_S = 10.0  # the loop's current sync
CLOSE_S = 10.0  # a client session


def service_account_token(namespace: str, name: str) -> str:
    return f"sa:{namespace}:{name}"


class Kubelet:
    def __init__(
        self,
        api: ClusterApi,
        api_url: str,
        network: PodNetwork,
        runtime: Runtime,
        workdir: Path,
        node_cache: Path,
        time_scale: float = 0.2,
    ) -> None:
        self.api = api
        self.api_url = api_url
        self.network = network
        self.runtime = runtime
        self.workdir = workdir
        self.node_cache = node_cache
        self.time_scale = time_scale
        self.client = KubeClient(api_url, KUBELET_TOKEN)
        self.runners: dict[str, PodRunner] = {}  # pod uid -> runner
        self._wake = asyncio.Event()
        self._hosts: dict[str, list[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._stopping: set[asyncio.Task[None]] = set()
        self._stopped: list[PodRunner] = []  # deleted pods, kept for a teardown that hangs
        # False leaves new pods Pending, as a node still being provisioned would: a test can then
        # act while no new pod can possibly be ready, whatever the machine's speed.
        self.admitting = True
        # The preStop sleeps' and grace periods' scale when not time_scale: NOTE: an engine's
        # drain deadline (--drain-timeout) runs in real seconds, so a scenario about draining
        # needs the grace period that covers it in real seconds too (1.0).
        self.lifecycle_time_scale: float | None = None

    @property
    def lifecycle_scale(self) -> float:
        return self.time_scale if self.lifecycle_time_scale is None else self.lifecycle_time_scale

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        """Stop the loop, then every pod (each step bounded: teardown.py), then the client."""
        self._closing = True  # NOTE: the loop ends on this even if the cancel below is lost
        if self._task is not None:
            self._task.cancel()
            await bounded(self._task, LOOP_STOP_S, "the kubelet's loop")
        self.time_scale = min(self.time_scale, 0.05)  # no long grace periods at teardown
        self.lifecycle_time_scale = None
        runners = [*self.runners.values(), *self._stopped]
        stops = [*(r.stop() for r in self.runners.values()), *self._stopping]
        stopping = asyncio.gather(*stops, return_exceptions=True)
        if not await bounded(stopping, TEARDOWN_S, "pods stopping"):
            # A teardown that hangs would hold CI until its limit: name what was still running,
            # kill it, and go on (the scenario's own result stands).
            alive = [
                f"{r.namespace}/{r.name}/{c.name}"
                for r in runners
                for c in r.containers
                if c.process is not None and c.process.returncode is None
            ]
            warnings.warn(
                f"pods still stopping after {TEARDOWN_S:.0f} s, killed: {alive}", stacklevel=1
            )
            for runner in runners:
                for container in runner.containers:
                    container.kill()
        self.runners.clear()
        await bounded(self.client.close(), CLOSE_S, "the kubelet's API client")

    def wake(self) -> None:
        self._wake.set()

    def pods(self, prefix: str = "", namespace: str | None = None) -> list[PodRunner]:
        """The running pods whose name starts with `prefix`, oldest first."""
        found = [r for r in self.runners.values() if r.name.startswith(prefix)]
        return [r for r in found if namespace in (None, r.namespace)]

    async def _loop(self) -> None:
        while not self._closing:
            try:
                await self.sync()
            except Exception:
                logger.exception("kubelet sync failed")
            self._wake.clear()
            # NOTE: not `asyncio.wait_for`: on Python 3.11, a cancel that comes in the same turn
            # of the loop as the wake-up (a pod's status just published) is lost there, and the
            # loop went on: close() waited for it forever (CI's 900 s teardown).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SYNC_PERIOD_S):
                    await self._wake.wait()

    async def sync(self) -> None:
        await controllers.sync_deployments(self)
        await self._sync_pods()
        await controllers.sync_endpoint_slices(self)
        await controllers.collect_garbage(self)
        self._sync_hosts()

    async def _sync_pods(self) -> None:
        live = {p["metadata"]["uid"]: p for p in self.api.all_live(controllers.PODS)}
        for uid, pod in live.items():
            if uid not in self.runners and self.admitting:
                self.runners[uid] = runner = PodRunner(pod, self)
                runner.start()
        for uid in [uid for uid in self.runners if uid not in live]:
            runner = self.runners.pop(uid)
            self._stopped.append(runner)
            task = asyncio.create_task(runner.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    # ---- what pods get from the node ---------------------------------------------------------

    def lookup(self, namespace: str) -> Lookup:
        return lambda resource, name: self.api.live(resource, namespace, name)

    def service_account_folder(self, namespace: str, name: str) -> Path:
        """A kubeconfig for the API server whose bearer token names the service account."""
        folder = self.workdir / "serviceaccounts" / f"{namespace}_{name}"
        if not folder.exists():
            folder.mkdir(parents=True)
            write_kubeconfig(folder / "kubeconfig", self.api_url)
            text = (folder / "kubeconfig").read_text()
            token = service_account_token(namespace, name)
            (folder / "kubeconfig").write_text(text.replace("test-token", token))
            (folder / "kubeconfig").chmod(0o644)
            folder.chmod(0o755)
        return folder

    def node_cache_mounts(self, env: dict[str, str], mounts: list[Mount]) -> list[Mount]:
        """The node's warm pagedock cache (built-in model, weights, compiled CPU kernels) inside
        the pod's cache volume: NOTE: a stand-in for a model already present on the node; the
        pods have no route to PyPI, and the first engine start compiles and converts once."""
        cache = env.get("XDG_CACHE_HOME")
        if cache is None or not any(m.target == cache for m in mounts):
            return []
        return [
            Mount(self.node_cache / "pagedock", f"{cache}/pagedock"),
            Mount(self.node_cache / "torch_extensions", f"{cache}/torch_extensions"),
        ]

    def write_hosts(self, runner: PodRunner) -> None:
        lines = [f"{runner.ip} {runner.name}", *self._service_lines(runner.namespace)]
        self.network.write_hosts(runner.netns, lines)
        self._hosts[runner.uid] = lines

    def _sync_hosts(self) -> None:
        for runner in list(self.runners.values()):
            lines = [f"{runner.ip} {runner.name}", *self._service_lines(runner.namespace)]
            if self._hosts.get(runner.uid) != lines:
                self.network.write_hosts(runner.netns, lines)
                self._hosts[runner.uid] = lines

    def _service_lines(self, own_namespace: str) -> list[str]:
        """Each Service's DNS names -> its ready pods' IPs: all of them for a headless Service (as
        cluster DNS answers), one for the others (there are no ClusterIPs and no kube-proxy)."""
        lines = []
        for service in self.api.all_live(controllers.SERVICES):
            namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
            ips = _ready_ips(self.api.live(controllers.SLICES, namespace, f"{name}-e2e"))
            if not ips:
                continue
            names = [f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}.svc"]
            names += [name] if namespace == own_namespace else []
            headless = service["spec"].get("clusterIP") == "None"
            lines += [f"{ip} {' '.join(names)}" for ip in (ips if headless else ips[:1])]
        return lines


def _ready_ips(endpoint_slice: Obj | None) -> list[str]:
    endpoints = (endpoint_slice or {}).get("endpoints") or []
    return [e["addresses"][0] for e in endpoints if e["conditions"].get("ready")]


def prepare_node_cache(node_cache: Path, gguf: Path) -> None:
    """The node's cache folder, owned by the pods' user, seeded with the built-in model the host
    fetched (the only step that needs the network)."""
    models = node_cache / "pagedock" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (node_cache / "torch_extensions").mkdir(exist_ok=True)
    if not (models / gguf.name).exists():
        shutil.copy2(gguf, models / gguf.name)
    for path in [node_cache, *node_cache.rglob("*")]:
        shutil.chown(path, 10001, 10001)
