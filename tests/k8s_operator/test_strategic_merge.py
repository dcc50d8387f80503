"""Strategic merge patch as the API server applies it (strategic_merge.py), in the emulator, and
through kubectl, which sends one for `kubectl patch` of a built-in kind by default."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
from typing import Any

import aiohttp
import pytest

from tests.k8s_operator.emulator import Emulator, merge_patch_between
from tests.k8s_operator.helpers import make_llmd, send
from tests.k8s_operator.strategic_merge import PatchError, strategic_merge

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}


def deployment() -> dict[str, Any]:
    container = {
        "name": "engine",
        "image": "engine:1",
        "ports": [{"containerPort": 8000, "name": "http"}],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }
    sidecar = {"name": "sidecar", "image": "sidecar:1"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default", "finalizers": ["a"]},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [container, sidecar]},
            },
        },
    }


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = obj["spec"]["template"]["spec"]["containers"]
    return result


def test_containers_merge_by_name_and_env_by_name() -> None:
    engine = {"name": "engine", "image": "engine:2", "env": [{"name": "B", "value": "3"}]}
    patch = {"spec": {"template": {"spec": {"containers": [engine]}}}}
    merged = containers(strategic_merge(deployment(), patch))
    assert [c["name"] for c in merged] == ["engine", "sidecar"]  # a merge patch would drop one
    assert merged[0]["image"] == "engine:2"
    assert merged[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert merged[0]["ports"] == [{"containerPort": 8000, "name": "http"}]


def test_directives_delete_replace_order_and_primitive_lists() -> None:
    spec = {"containers": [{"name": "sidecar", "$patch": "delete"}, {"name": "new", "image": "n"}]}
    spec["$setElementOrder/containers"] = [{"name": "new"}, {"name": "engine"}]  # type: ignore[assignment]
    patch = {
        "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {"template": {"spec": spec}, "selector": {"$patch": "replace", "matchLabels": {}}},
    }
    merged = strategic_merge(deployment(), patch)
    assert [c["name"] for c in containers(merged)] == ["engine", "new"]
    assert merged["metadata"]["finalizers"] == ["b"]
    assert merged["spec"]["selector"] == {"matchLabels": {}}
    replaced = {
        "spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "x"}]}}}
    }
    assert [c["name"] for c in containers(strategic_merge(deployment(), replaced))] == ["x"]


def test_an_item_without_its_merge_key_is_refused() -> None:
    patch = {"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}}
    with pytest.raises(PatchError, match="merge key: name"):
        strategic_merge(deployment(), patch)


def test_the_merge_patch_between_two_objects_makes_one_of_the_other() -> None:
    old = deployment()
    new = strategic_merge(old, {"metadata": {"labels": {"x": "1"}, "finalizers": None}})
    patch = merge_patch_between(old, new)
    assert patch == {"metadata": {"labels": {"x": "1"}, "finalizers": None}}


@pytest.mark.asyncio
async def test_the_emulator_applies_a_strategic_patch_and_refuses_one_to_a_custom_resource(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", DEPLOYMENTS, deployment())
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "engine", "image": "e:2"}]}}}}
    async with api.patch(f"{DEPLOYMENTS}/d", json=patch, headers=SMP) as response:
        stored = await response.json()
        assert response.status == 200, stored
    assert [c["image"] for c in containers(stored)] == ["e:2", "sidecar:1"]
    llmds = "/apis/pagedock.dev/v1alpha1/namespaces/default/llmdeployments"
    await send(api, "POST", llmds, make_llmd())
    async with api.patch(f"{llmds}/chat", json={"spec": {}}, headers=SMP) as response:
        assert response.status == 415, await response.text()


@pytest.mark.asyncio
async def test_a_stale_resource_version_is_a_conflict(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    created = await send(api, "POST", DEPLOYMENTS, deployment())
    version = created["metadata"]["resourceVersion"]
    await send(api, "PATCH", f"{DEPLOYMENTS}/d", {"metadata": {"labels": {"a": "1"}}})
    stale = {"metadata": {"resourceVersion": version, "labels": {"a": "2"}}}
    headers = {"Content-Type": "application/merge-patch+json"}
    async with api.patch(f"{DEPLOYMENTS}/d", json=stale, headers=headers) as response:
        status = await response.json()
        assert response.status == 409, status
        assert "the object has been modified" in status["message"]


@pytest.mark.asyncio
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
async def test_kubectl_patch_sends_a_strategic_merge_patch_the_emulator_applies(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", DEPLOYMENTS, copy.deepcopy(deployment()))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "s:2"}]}}}}
    process = await asyncio.create_subprocess_exec(
        *("kubectl", "patch", "deployments", "d", "-n", "default", "-p", json.dumps(patch)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()
    [sent] = list(cluster["patch"])
    assert sent.headers["Content-Type"] == SMP["Content-Type"]
    stored = cluster.objects["apps/v1/deployments", "default", "d"].raw
    assert [(c["name"], c["image"]) for c in containers(stored)] == [
        ("engine", "engine:1"),
        ("sidecar", "s:2"),
    ]
