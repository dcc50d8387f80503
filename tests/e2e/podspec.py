"""What a kubelet reads from a pod spec: the command line (image entrypoint/cmd vs. the container's
command/args), the environment (`env`, `envFrom`, `valueFrom` of ConfigMaps, Secrets and pod
fields), the volume mounts, the user, and the probes. Pure functions; a missing ConfigMap or key
raises `ContainerConfigError`, which the kubelet reports as CreateContainerConfigError."""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Lookup = Callable[[str, str], Obj | None]  # (resource, name) -> object in the pod's namespace
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class ContainerConfigError(Exception):
    """The container cannot be configured (missing ConfigMap, Secret or key)."""


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """What an image brings: ENTRYPOINT, CMD, ENV, USER, WORKDIR."""

    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    user: tuple[int, int]
    workdir: str


@dataclasses.dataclass(frozen=True)
class Probe:
    kind: str  # startup, readiness, liveness
    path: str
    port: int
    period_s: float
    timeout_s: float
    failure_threshold: int
    initial_delay_s: float


def command_line(container: Obj, image: ImageConfig) -> list[str]:
    """Kubernetes' rule: `command` replaces ENTRYPOINT (and drops CMD); `args` replace CMD."""
    if container.get("command"):
        return [*container["command"], *container.get("args", [])]
    args = container.get("args", image.cmd)
    return [*image.entrypoint, *args]


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """`$(VAR)` in command and args, from the container's environment."""
    return [_VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), arg) for arg in argv]


def environment(pod: Obj, container: Obj, image: ImageConfig, lookup: Lookup) -> dict[str, str]:
    """The image's ENV, then `envFrom` in order, then `env` (later entries win)."""
    env = dict(image.env)
    for source in container.get("envFrom", []):
        env.update(_env_from(source, lookup))
    for var in container.get("env", []):
        value = _env_value(pod, var, lookup)
        if value is not None:
            env[var["name"]] = _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), value)
    return env


def _env_from(source: Obj, lookup: Lookup) -> dict[str, str]:
    prefix = source.get("prefix", "")
    for field, resource in (("configMapRef", "v1/configmaps"), ("secretRef", "v1/secrets")):
        if field not in source:
            continue
        ref = source[field]
        obj = lookup(resource, ref["name"])
        if obj is None:
            if ref.get("optional"):
                return {}
            raise ContainerConfigError(f'{resource.split("/")[-1][:-1]} "{ref["name"]}" not found')
        return {prefix + key: value for key, value in _data(obj).items()}
    raise ContainerConfigError(f"unsupported envFrom source: {source}")


def _env_value(pod: Obj, var: Obj, lookup: Lookup) -> str | None:
    if "valueFrom" not in var:
        return str(var.get("value", ""))
    source = var["valueFrom"]
    if "fieldRef" in source:
        return _field(pod, source["fieldRef"]["fieldPath"])
    for field, resource in (("configMapKeyRef", "v1/configmaps"), ("secretKeyRef", "v1/secrets")):
        if field in source:
            ref = source[field]
            obj = lookup(resource, ref["name"])
            value = None if obj is None else _data(obj).get(ref["key"])
            if value is None and not ref.get("optional"):
                raise ContainerConfigError(f"couldn't find key {ref['key']} in {ref['name']}")
            return value
    raise ContainerConfigError(f"unsupported valueFrom: {source}")


def _data(obj: Obj) -> dict[str, str]:
    """A ConfigMap's data, or a Secret's data decoded (plus stringData)."""
    if obj.get("kind") == "Secret":
        decoded = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return {**decoded, **(obj.get("stringData") or {})}
    return {k: str(v) for k, v in (obj.get("data") or {}).items()}


def _field(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    if match := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    if path not in fields:
        raise ContainerConfigError(f"unsupported fieldRef: {path}")
    return str(fields[path])


def run_as(pod: Obj, container: Obj, image: ImageConfig) -> tuple[int, int]:
    """(uid, gid): the container's securityContext, else the pod's, else the image's USER."""
    pod_context = pod["spec"].get("securityContext") or {}
    context = {**pod_context, **(container.get("securityContext") or {})}
    return (
        int(context.get("runAsUser", image.user[0])),
        int(context.get("runAsGroup", image.user[1])),
    )


def supplementary_groups(pod: Obj) -> tuple[int, ...]:
    """The pod's fsGroup, then its supplementalGroups: the groups every container runs with."""
    context = pod["spec"].get("securityContext") or {}
    fs_group = [context["fsGroup"]] if "fsGroup" in context else []
    return tuple(int(g) for g in [*fs_group, *context.get("supplementalGroups", [])])


def probes(container: Obj, scale: float) -> list[Probe]:
    """The container's HTTP probes with their periods multiplied by `scale` (paths and ports
    stay exact: a wrong path or port fails as it would in a cluster)."""
    found = []
    for kind in ("startup", "readiness", "liveness"):
        spec = container.get(f"{kind}Probe")
        if spec is None:
            continue
        if "httpGet" not in spec:
            raise ContainerConfigError(f"{kind}Probe: only httpGet probes are emulated")
        found.append(
            Probe(
                kind=kind,
                path=spec["httpGet"].get("path", "/"),
                port=container_port(container, spec["httpGet"]["port"]),
                period_s=spec.get("periodSeconds", 10) * scale,
                timeout_s=float(spec.get("timeoutSeconds", 1)),
                failure_threshold=int(spec.get("failureThreshold", 3)),
                initial_delay_s=spec.get("initialDelaySeconds", 0) * scale,
            )
        )
    return found


def container_port(container: Obj, port: int | str) -> int:
    """A port number, or a named port of the container (an unknown name is a config error)."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for item in container.get("ports", []):
        if item.get("name") == port:
            return int(item["containerPort"])
    raise ContainerConfigError(f'container "{container["name"]}" has no port named "{port}"')
