"""One pod on the e2e node: its network namespace and IP, its volumes (emptyDir; configMap,
secret and projected ones as tests/e2e/volumes.py writes them), what a kubelet injects (API
credentials as a kubeconfig when the service-account token is automounted), its containers, and
its status as the API shows it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.e2e.container import ContainerRunner, now
from tests.e2e.podspec import (
    ContainerConfigError,
    ImageConfig,
    command_line,
    environment,
    expand,
    run_as,
    supplementary_groups,
)
from tests.e2e.runtime import Launch, Mount
from tests.e2e.volumes import is_atomic_writer, write_volume

if TYPE_CHECKING:
    from tests.e2e.kubelet import Kubelet

Obj = dict[str, Any]
SA_MOUNT = "/run/pagedock-e2e/serviceaccount"


class PodRunner:
    def __init__(self, pod: Obj, kubelet: Kubelet) -> None:
        self.pod = pod
        self.kubelet = kubelet
        self.name: str = pod["metadata"]["name"]
        self.namespace: str = pod["metadata"]["namespace"]
        self.uid: str = pod["metadata"]["uid"]
        self.folder = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}"
        self.netns, self.ip = kubelet.network.add_pod()
        self.started_at = now()
        self.containers = [
            ContainerRunner(
                c, kubelet.runtime, self._configure, self._publish, kubelet.time_scale, self.ip
            )
            for c in pod["spec"]["containers"]
        ]
        self.task: asyncio.Task[Any] | None = None

    @property
    def ready(self) -> bool:
        return all(c.ready for c in self.containers)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.kubelet.write_hosts(self)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        await self._publish()
        await asyncio.gather(*(c.run() for c in self.containers))

    async def stop(self) -> None:
        """preStop hooks, then SIGTERM and the grace period (both scaled), then cleanup."""
        scale = self.kubelet.lifecycle_scale
        grace_s = self.pod["spec"].get("terminationGracePeriodSeconds", 30) * scale
        for container in self.containers:
            container.deleting = True
        for container in self.containers:
            sleep = ((container.spec.get("lifecycle") or {}).get("preStop") or {}).get("sleep")
            if sleep and container.process is not None:
                await asyncio.sleep(sleep["seconds"] * scale)
        await asyncio.gather(*(c.stop(grace_s) for c in self.containers))
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        for container in self.containers:
            self.kubelet.runtime.remove(self._container_id(container.name))
        self.kubelet.network.remove_pod(self.netns)

    def status(self) -> Obj:
        statuses = [c.status() for c in self.containers]
        running = any("running" in s["state"] for s in statuses)
        ready = "True" if self.ready else "False"
        conditions = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": ready},
            {"type": "Ready", "status": ready},
        ]
        return {
            "phase": "Running" if running else "Pending",
            "hostIP": self.kubelet.network.host_ip,
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.started_at,
            "conditions": conditions,
            "containerStatuses": statuses,
        }

    async def _publish(self) -> None:
        await self.kubelet.client.patch(
            "v1/pods", self.namespace, self.name, {"status": self.status()}, "status"
        )
        self.kubelet.wake()

    def _container_id(self, container: str) -> str:
        return f"pd{self.kubelet.network.run_id}-{self.name}-{container}"

    def _configure(self, container: Obj, image: ImageConfig) -> Launch:
        pod = {**self.pod, "status": {"podIP": self.ip, "hostIP": self.kubelet.network.host_ip}}
        lookup = self.kubelet.lookup(self.namespace)
        env = environment(pod, container, image, lookup)
        mounts = self._mounts(container)
        security = container.get("securityContext") or {}
        if self._automount():
            sa = self.pod["spec"].get("serviceAccountName") or "default"
            folder = self.kubelet.service_account_folder(self.namespace, sa)
            mounts.append(Mount(folder, SA_MOUNT, read_only=True))
            env["KUBECONFIG"] = f"{SA_MOUNT}/kubeconfig"
        if self.kubelet.runtime.uses_node_cache:
            mounts += self.kubelet.node_cache_mounts(env, mounts)
        return Launch(
            container_id=self._container_id(container["name"]),
            netns=self.netns,
            image=container["image"],
            argv=expand(command_line(container, image), env),
            env=env,
            mounts=mounts,
            user=run_as(self.pod, container, image),
            workdir=container.get("workingDir") or image.workdir,
            log_path=self.folder / f"{container['name']}.log",
            read_only_root=bool(security.get("readOnlyRootFilesystem")),
            groups=supplementary_groups(self.pod),
        )

    def _automount(self) -> bool:
        spec = self.pod["spec"]
        if "automountServiceAccountToken" in spec:
            return bool(spec["automountServiceAccountToken"])
        sa = self.kubelet.api.live(
            "v1/serviceaccounts", self.namespace, spec.get("serviceAccountName") or "default"
        )
        return bool((sa or {}).get("automountServiceAccountToken", True))

    def _mounts(self, container: Obj) -> list[Mount]:
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        mounts = []
        for item in container.get("volumeMounts", []):
            if item["name"] not in volumes:
                raise ContainerConfigError(f'volume "{item["name"]}" not found')
            source = self._volume(volumes[item["name"]]) / item.get("subPath", "")
            mounts.append(Mount(source, item["mountPath"], bool(item.get("readOnly"))))
        return mounts

    def _volume(self, volume: Obj) -> Path:
        folder = self.folder / "volumes" / volume["name"]
        if folder.exists():
            return folder
        folder.mkdir(parents=True)
        folder.chmod(0o777)  # an emptyDir is writable by any pod user
        if "emptyDir" in volume:
            return folder
        if is_atomic_writer(volume):
            fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
            try:
                write_volume(volume, folder, self._live, fs_group)
            except ContainerConfigError:
                shutil.rmtree(folder)
                raise
            folder.chmod(0o755)
            return folder
        shutil.rmtree(folder)
        raise ContainerConfigError(
            f"volume {volume['name']}: only emptyDir, configMap, secret, projected"
        )

    def _live(self, resource: str, name: str) -> Obj | None:
        return self.kubelet.api.live(resource, self.namespace, name)
