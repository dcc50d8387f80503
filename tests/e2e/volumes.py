"""What the e2e kubelet writes into a pod's configMap, secret and projected volumes, as a real
kubelet does: every key, or the listed `items` at their paths (a listed key the object lacks
fails the mount unless the source is `optional`); each file's `mode`, else the volume's
`defaultMode`, else 0644; with the pod's fsGroup, files belong to that group and are readable by
it (the kubelet's volume ownership for read-only volumes)."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.podspec import ContainerConfigError

Obj = dict[str, Any]
Lookup = Callable[[str, str], Obj | None]
"""(resource, name) -> the live object in the pod's namespace, or None."""

DEFAULT_MODE = 0o644
GROUP_READ = 0o440
RESOURCES = {"configMap": "v1/configmaps", "secret": "v1/secrets"}
SOURCES = {"configMap", "secret", "projected"}


def is_atomic_writer(volume: Obj) -> bool:
    """Whether the volume is one of the kinds this module writes."""
    return bool(SOURCES & volume.keys())


def write_volume(volume: Obj, folder: Path, lookup: Lookup, fs_group: int | None) -> None:
    """Fill `folder` with the volume's files; ContainerConfigError names what fails the mount."""
    if "projected" in volume:
        projected = volume["projected"]
        default_mode = projected.get("defaultMode", DEFAULT_MODE)
        for source in projected.get("sources", []):
            kind = next((k for k in RESOURCES if k in source), None)
            if kind is None:
                raise ContainerConfigError(
                    f"volume {volume['name']}: projected sources other than configMap and secret "
                    f"are not emulated: {sorted(source)}"
                )
            _write_source(kind, source[kind], folder, lookup, default_mode, fs_group)
        return
    kind = next(k for k in RESOURCES if k in volume)
    spec = volume[kind]
    default_mode = spec.get("defaultMode", DEFAULT_MODE)
    _write_source(kind, spec, folder, lookup, default_mode, fs_group)


def _write_source(
    kind: str, spec: Obj, folder: Path, lookup: Lookup, default_mode: int, fs_group: int | None
) -> None:
    name = str(spec.get("name") or spec.get("secretName") or "")
    obj = lookup(RESOURCES[kind], name)
    optional = bool(spec.get("optional"))
    if obj is None:
        if optional:
            return
        raise ContainerConfigError(f'{kind} "{name}" not found')
    data = _decoded(kind, obj)
    items = spec.get("items")
    if items is None:
        items = [{"key": key, "path": key} for key in sorted(data)]
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise ContainerConfigError(
                f'{kind} "{name}": references non-existent {kind} key: {item["key"]}'
            )
        mode = item.get("mode", default_mode)
        _write_file(folder, item["path"], data[item["key"]], mode, fs_group)


def _decoded(kind: str, obj: Obj) -> dict[str, bytes]:
    data = {key: str(value).encode() for key, value in (obj.get("data") or {}).items()}
    if kind == "secret":
        data = {key: base64.b64decode(value) for key, value in data.items()}
    else:
        binary = obj.get("binaryData") or {}
        data.update({key: base64.b64decode(value) for key, value in binary.items()})
    return data


def _write_file(folder: Path, relative: str, data: bytes, mode: int, fs_group: int | None) -> None:
    if relative.startswith("/") or ".." in Path(relative).parts:
        raise ContainerConfigError(f"volume path {relative!r} must be relative, without '..'")
    path = folder / relative
    for parent in reversed(path.relative_to(folder).parents[:-1]):
        directory = folder / parent
        directory.mkdir(exist_ok=True)
        directory.chmod(0o755)
    path.write_bytes(data)
    if fs_group is not None:
        os.chown(path, -1, fs_group)
        mode |= GROUP_READ
    path.chmod(mode)
