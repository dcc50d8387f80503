"""Container runtimes of the kubelet stand-in; both start a container's process inside its pod's
network namespace with the pod's volumes mounted, as the pod's user:

* `ProcessRuntime`: the image is this checkout (the shared venv and the worktree); each known
  image name maps to what its Dockerfile target sets (ENTRYPOINT, CMD, ENV, USER). The process runs
  under `ip netns exec` + `unshare --mount` (bind mounts onto the mountPaths) + `setpriv`.
* `BuildahRuntime`: the image is a locally built one (`buildah images`); `buildah run` inside the
  pod's network namespace, its ENTRYPOINT/CMD/ENV/USER read from the image.

An image a runtime cannot run is `ImagePullError` (ErrImagePull, then ImagePullBackOff)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from tests.e2e.netns import IP
from tests.e2e.podspec import ImageConfig

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# NOTE: pods mount volumes over /tmp, /cache and more, which would hide a checkout (and its venv)
# living there, as a CI clone under /tmp does; the session bind-mounts the checkout here, a path
# no pod mounts over, and the checkout images run from it (conftest.py's `exposed_checkout`).
CHECKOUT = Path("/var/tmp/pagedock-e2e-checkout")


def _in_checkout(path: Path) -> Path:
    """`path` as the pods see it: under CHECKOUT when it is inside this checkout."""
    return CHECKOUT / path.relative_to(REPO) if path.is_relative_to(REPO) else path


ENGINE_IMAGE = "localhost/pagedock/engine-cpu:dev"
ROUTER_IMAGE = "localhost/pagedock/router:dev"
OPERATOR_IMAGE = "localhost/pagedock/operator:dev"
NONROOT = (10001, 10001)


class ImagePullError(Exception):
    """The runtime cannot run this image."""


@dataclasses.dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = False


@dataclasses.dataclass(frozen=True)
class Launch:
    """One container start, fully resolved."""

    container_id: str
    netns: str
    image: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    user: tuple[int, int]
    workdir: str
    log_path: Path
    read_only_root: bool = False
    """securityContext.readOnlyRootFilesystem: only the volumes are writable."""
    groups: tuple[int, ...] = ()
    """Supplementary groups: the pod's fsGroup and supplementalGroups."""


class Runtime(Protocol):
    name: str
    uses_node_cache: bool
    """Whether the pods need the node's model cache (the built images carry the model)."""

    def pull(self, image: str) -> ImageConfig: ...

    async def start(self, launch: Launch) -> asyncio.subprocess.Process: ...

    def remove(self, container_id: str) -> None: ...


def _checkout_image(cmd: list[str], **env: str) -> ImageConfig:
    """A Dockerfile target of this repository, run from this checkout."""
    venv_bin = _in_checkout(VENV_BIN)
    image_env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        # The venv's editable install and its scripts' shebangs name the checkout's own path,
        # which a pod may not see: the interpreter runs `-m pagedock` from CHECKOUT instead.
        "PYTHONPATH": f"{CHECKOUT}:{CHECKOUT / 'operator'}",
        **env,
    }
    entrypoint = [str(venv_bin / Path(sys.executable).name), "-m", "pagedock"]
    return ImageConfig(entrypoint, cmd, image_env, NONROOT, "/tmp")


CHECKOUT_IMAGES: dict[str, ImageConfig] = {
    ENGINE_IMAGE: _checkout_image(
        ["serve", "--host", "0.0.0.0", "--port", "8000"],
        HF_HOME="/cache/huggingface",
        TRITON_CACHE_DIR="/cache/triton",
    ),
    ROUTER_IMAGE: _checkout_image(["route"]),
    OPERATOR_IMAGE: _checkout_image(["operator", "run"]),
}


def _mount_script(launch: Launch, setpriv: list[str]) -> str:
    """The shell run in the pod's mount namespace: mount the volumes, then exec the container."""
    lines = ["set -e"]
    for mount in launch.mounts:
        target = shlex.quote(mount.target)
        if mount.source.is_dir():
            lines.append(f"mkdir -p {target}")
        lines.append(f"mount --bind {shlex.quote(str(mount.source))} {target}")
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    if launch.read_only_root:
        # NOTE: only the root mount turns read-only; the volumes are mounts of their own.
        lines.append("mount -o remount,bind,ro /")
    lines.append(f"cd {shlex.quote(launch.workdir)}")
    lines.append(f'exec {" ".join(setpriv)} -- "$@"')
    return "\n".join(lines)


async def _spawn(
    argv: list[str], env: dict[str, str], log_path: Path
) -> asyncio.subprocess.Process:
    log = open(log_path, "ab")  # noqa: SIM115 - the child holds it; closed below
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


def _image_etc(folder: Path) -> list[Mount]:
    """/etc/passwd and /etc/group with the images' user (the Dockerfile's `useradd pagedock`):
    getpass and friends fail for a uid the system does not know."""
    folder.mkdir(parents=True, exist_ok=True)
    passwd = Path("/etc/passwd").read_text() + "pagedock:x:10001:10001::/tmp:/usr/sbin/nologin\n"
    group = Path("/etc/group").read_text() + "pagedock:x:10001:\n"
    (folder / "passwd").write_text(passwd)
    (folder / "group").write_text(group)
    return [
        Mount(folder / "passwd", "/etc/passwd", True),
        Mount(folder / "group", "/etc/group", True),
    ]


class ProcessRuntime:
    name = "process"
    uses_node_cache = True

    def __init__(self, etc: Path, images: dict[str, ImageConfig] | None = None) -> None:
        self.images = CHECKOUT_IMAGES if images is None else images
        self.etc_mounts = _image_etc(etc)

    def pull(self, image: str) -> ImageConfig:
        if image not in self.images:
            raise ImagePullError(f'failed to pull image "{image}": not found in the e2e images')
        return self.images[image]

    async def start(self, launch: Launch) -> asyncio.subprocess.Process:
        uid, gid = launch.user
        groups = (
            f"--groups={','.join(map(str, launch.groups))}" if launch.groups else "--clear-groups"
        )
        setpriv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", groups]
        launch = dataclasses.replace(launch, mounts=[*self.etc_mounts, *launch.mounts])
        script = _mount_script(launch, setpriv)
        argv = [
            IP,
            "netns",
            "exec",
            launch.netns,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            *launch.argv,
        ]
        env = {**launch.env, "PATH": launch.env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"}
        return await _spawn(argv, env, launch.log_path)

    def remove(self, container_id: str) -> None:
        pass


class BuildahRuntime:
    name = "buildah"
    uses_node_cache = False

    def __init__(self) -> None:
        self.buildah = shutil.which("buildah") or "buildah"
        self.containers: set[str] = set()

    @staticmethod
    def missing_images(*images: str) -> list[str]:
        """The images `buildah` does not have (all of them without buildah)."""
        if shutil.which("buildah") is None:
            return list(images)
        inspect = ["buildah", "inspect", "--type", "image"]
        return [i for i in images if subprocess.run([*inspect, i], capture_output=True).returncode]

    def pull(self, image: str) -> ImageConfig:
        done = subprocess.run(
            [self.buildah, "inspect", "--type", "image", image], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise ImagePullError(f'failed to pull image "{image}": {done.stderr.strip()[-200:]}')
        config = json.loads(done.stdout)["OCIv1"]["config"]
        env = dict(item.split("=", 1) for item in config.get("Env", []))
        user = (config.get("User") or "0:0").split(":")
        uid = int(user[0]) if user[0].isdigit() else 0
        gid = int(user[1]) if len(user) > 1 and user[1].isdigit() else uid
        return ImageConfig(
            config.get("Entrypoint") or [],
            config.get("Cmd") or [],
            env,
            (uid, gid),
            config.get("WorkingDir") or "/",
        )

    async def start(self, launch: Launch) -> asyncio.subprocess.Process:
        if launch.container_id not in self.containers:
            subprocess.run(
                [self.buildah, "from", "--pull-never", "--name", launch.container_id, launch.image],
                check=True,
                capture_output=True,
            )
            self.containers.add(launch.container_id)
        volumes = [
            f"--volume={m.source}:{m.target}:{'ro' if m.read_only else 'rw'}" for m in launch.mounts
        ]
        envs = [f"--env={key}={value}" for key, value in launch.env.items()]
        argv = [
            IP,
            "netns",
            "exec",
            launch.netns,
            self.buildah,
            "run",
            "--isolation=chroot",
            "--network=host",
            # NOTE: launch.groups is not passed: the images' user and group are the pods' fsGroup.
            f"--user={launch.user[0]}:{launch.user[1]}",
            f"--workingdir={launch.workdir}",
            *volumes,
            *envs,
            launch.container_id,
            "--",
            *launch.argv,
        ]
        return await _spawn(argv, dict(os.environ), launch.log_path)

    def remove(self, container_id: str) -> None:
        if container_id in self.containers:
            subprocess.run([self.buildah, "rm", container_id], capture_output=True)
            self.containers.discard(container_id)
