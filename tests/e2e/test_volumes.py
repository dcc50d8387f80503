"""What the kubelet stand-in writes into configMap, secret and projected volumes (runs in
`make test`), down to the operator's tenants volume read back by the router's loader."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.podspec import ContainerConfigError, supplementary_groups
from tests.e2e.volumes import write_volume


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


OBJECTS: dict[tuple[str, str], dict[str, Any]] = {
    ("v1/configmaps", "cm"): {"data": {"a.yaml": "a: 1\n", "b": "bee"}, "binaryData": {}},
    ("v1/secrets", "keys"): {"data": {"api-key": b64("sk-one"), "previous": b64("sk-old")}},
}


def lookup(resource: str, name: str) -> dict[str, Any] | None:
    return OBJECTS.get((resource, name))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_config_map_volume_writes_every_key_at_0644(tmp_path: Path) -> None:
    write_volume({"name": "v", "configMap": {"name": "cm"}}, tmp_path, lookup, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b"]
    assert (tmp_path / "b").read_text() == "bee"
    assert mode(tmp_path / "b") == 0o644


def test_items_choose_keys_paths_and_modes(tmp_path: Path) -> None:
    items = [
        {"key": "api-key", "path": "keys/chat/0", "mode": 0o400},
        {"key": "previous", "path": "p"},
    ]
    volume = {"name": "v", "secret": {"secretName": "keys", "items": items, "defaultMode": 0o440}}
    write_volume(volume, tmp_path, lookup, None)
    assert (tmp_path / "keys/chat/0").read_text() == "sk-one"
    assert mode(tmp_path / "keys/chat/0") == 0o400
    assert mode(tmp_path / "p") == 0o440
    assert not (tmp_path / "api-key").exists()


def test_a_missing_object_or_key_fails_the_mount_unless_optional(tmp_path: Path) -> None:
    with pytest.raises(ContainerConfigError, match='secret "gone" not found'):
        write_volume({"name": "v", "secret": {"secretName": "gone"}}, tmp_path, lookup, None)
    items = [{"key": "nope", "path": "x"}]
    with pytest.raises(ContainerConfigError, match="non-existent configMap key: nope"):
        write_volume(
            {"name": "v", "configMap": {"name": "cm", "items": items}}, tmp_path, lookup, None
        )
    optional = {"name": "gone", "optional": True}
    write_volume({"name": "v", "configMap": optional}, tmp_path, lookup, None)
    assert list(tmp_path.iterdir()) == []


def test_paths_stay_inside_the_volume(tmp_path: Path) -> None:
    items = [{"key": "b", "path": "../escape"}]
    with pytest.raises(ContainerConfigError, match=r"without '\.\.'"):
        write_volume(
            {"name": "v", "configMap": {"name": "cm", "items": items}}, tmp_path, lookup, None
        )


def test_other_projected_sources_are_named_as_not_emulated(tmp_path: Path) -> None:
    volume = {"name": "v", "projected": {"sources": [{"downwardAPI": {"items": []}}]}}
    with pytest.raises(ContainerConfigError, match=r"not emulated.*downwardAPI"):
        write_volume(volume, tmp_path, lookup, None)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root (CI is root)")
def test_the_fs_group_owns_the_files_and_can_read_them(tmp_path: Path) -> None:
    volume = {"name": "v", "secret": {"secretName": "keys", "defaultMode": 0o400}}
    write_volume(volume, tmp_path, lookup, 10001)
    assert (tmp_path / "api-key").stat().st_gid == 10001
    assert mode(tmp_path / "api-key") == 0o440


def test_the_containers_run_with_the_fs_group_and_supplemental_groups() -> None:
    pod = {"spec": {"securityContext": {"fsGroup": 10001, "supplementalGroups": [7]}}}
    assert supplementary_groups(pod) == (10001, 7)
    assert supplementary_groups({"spec": {}}) == ()


def test_the_operators_tenants_volume_is_what_the_router_loads(tmp_path: Path) -> None:
    from llm_operator.builders import build_children

    from pagedock.tenancy.tenants import load_tenants
    from tests.k8s_operator.test_builders import find, make_context
    from tests.k8s_operator.test_tenancy_builders import TENANCY

    children = build_children(make_context({"tenancy": TENANCY}))
    config_map = find(children, "ConfigMap", "chat-tenants")
    objects = {
        ("v1/configmaps", "chat-tenants"): config_map,
        ("v1/secrets", "chat-keys"): {"data": {"api-key": b64("sk-chat"), "previous": b64("sk-0")}},
        ("v1/secrets", "batch-key"): {"data": {"token": b64("sk-batch\n")}},
    }
    spec = find(children, "Deployment", "chat-router")["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if "projected" in v]
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    write_volume(volume, tmp_path, lambda r, n: objects.get((r, n)), None)
    # The file names its keys at the mount path; read it where the pod would see it.
    text = (tmp_path / "tenants.yaml").read_text().replace(mount["mountPath"], str(tmp_path))
    (tmp_path / "local.yaml").write_text(text)
    table = load_tenants(tmp_path / "local.yaml")
    assert table.by_key("sk-chat").name == table.by_key("sk-0").name == "chat"
    assert table.by_key("sk-batch").name == "batch"
