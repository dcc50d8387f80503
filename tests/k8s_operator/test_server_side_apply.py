"""Server-side apply in the emulator (server_side_apply.py, managed_fields.py, field_paths.py):
field managers, conflicts, removal of what a manager stops applying; and through kubectl
(`apply --server-side`, `--field-manager`, `--force-conflicts`, the client-side migration)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.field_paths import from_fields_v1, path_string, to_fields_v1
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, live, make_llmd
from tests.k8s_operator.kubectl import kubectl, kubectl_ok, needs_kubectl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "llmdeployment.yaml"
DEPLOYMENTS = "/apis/apps/v1/namespaces/team-a/deployments"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
ENGINE = 'k:{"name":"engine"}'


def deployment(replicas: int = 1, **labels: str) -> dict[str, Any]:
    container = {"name": "engine", "image": "engine:1", "ports": [{"containerPort": 8000}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team-a", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [container]},
            },
        },
    }


async def apply(
    api: aiohttp.ClientSession, path: str, body: dict[str, Any], **params: str
) -> tuple[int, dict[str, Any]]:
    text = yaml.safe_dump(body)  # a YAML body, as the content type says
    async with api.patch(path, data=text, headers=APPLY, params=params) as response:
        return response.status, await response.json()


def owners(obj: dict[str, Any]) -> dict[str, set[tuple[str, ...]]]:
    """The fields each manager owns, by `manager/operation`."""
    return {
        f"{entry['manager']}/{entry['operation']}": from_fields_v1(entry["fieldsV1"])
        for entry in obj["metadata"].get("managedFields", [])
    }


def test_a_field_set_round_trips_through_fields_v1_with_items_by_their_keys() -> None:
    paths = {
        ("f:spec", "f:replicas"),
        ("f:spec", "f:containers", ENGINE),
        ("f:spec", "f:containers", ENGINE, "f:image"),
        ("f:metadata", "f:finalizers", 'v:"a"'),
    }
    tree = to_fields_v1(paths)
    assert tree["f:spec"]["f:containers"][ENGINE] == {".": {}, "f:image": {}}
    assert from_fields_v1(tree) == paths
    path = ("f:spec", "f:ports", 'k:{"containerPort":80,"protocol":"TCP"}', "f:name")
    assert path_string(path) == '.spec.ports[containerPort=80,protocol="TCP"].name'


@pytest.mark.asyncio
async def test_apply_creates_the_object_and_records_the_applied_fields(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    status, created = await apply(api, f"{DEPLOYMENTS}/d", deployment(), fieldManager="a")
    assert status in (200, 201), created
    assert created["metadata"]["uid"]
    [entry] = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == ("a", "Apply", "apps/v1")
    containers = entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert containers[ENGINE][".."[:1]] == {}
    port = 'k:{"containerPort":8000}'
    assert containers[ENGINE]["f:ports"][port] == {".": {}, "f:containerPort": {}}
    assert "f:name" not in entry["fieldsV1"].get("f:metadata", {})  # server-set: never owned


@pytest.mark.asyncio
async def test_apply_without_a_field_manager_is_refused(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    status, refusal = await apply(api, f"{DEPLOYMENTS}/d", deployment())
    assert status == 400, refusal
    assert "fieldManager: Required value: is required for apply patch" in refusal["message"]


@pytest.mark.asyncio
async def test_changing_a_field_another_manager_owns_conflicts_unless_forced(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await apply(api, f"{DEPLOYMENTS}/d", deployment(replicas=1), fieldManager="a")
    status, refusal = await apply(api, f"{DEPLOYMENTS}/d", deployment(3), fieldManager="b")
    assert status == 409, refusal
    assert refusal["reason"] == "Conflict"
    assert refusal["message"] == 'Apply failed with 1 conflict: conflict with "a": .spec.replicas'
    assert refusal["details"]["causes"] == [
        {"type": "FieldManagerConflict", "message": 'conflict with "a"', "field": ".spec.replicas"}
    ]
    assert live(cluster, "apps/v1/deployments", "d")["spec"]["replicas"] == 1  # type: ignore[index]
    status, forced = await apply(
        api, f"{DEPLOYMENTS}/d", deployment(3), fieldManager="b", force="true"
    )
    assert status == 200, forced
    assert forced["spec"]["replicas"] == 3
    assert ("f:spec", "f:replicas") in owners(forced)["b/Apply"]
    assert ("f:spec", "f:replicas") not in owners(forced)["a/Apply"]


@pytest.mark.asyncio
async def test_applying_the_same_value_shares_the_field_and_no_conflict(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await apply(api, f"{DEPLOYMENTS}/d", deployment(replicas=2), fieldManager="a")
    status, shared = await apply(api, f"{DEPLOYMENTS}/d", deployment(2), fieldManager="b")
    assert status == 200, shared
    managed = owners(shared)
    assert ("f:spec", "f:replicas") in managed["a/Apply"] & managed["b/Apply"]


@pytest.mark.asyncio
async def test_a_field_no_longer_applied_is_removed_unless_another_manager_owns_it(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    path = f"{DEPLOYMENTS}/d"
    await apply(api, path, deployment(tier="web", team="x"), fieldManager="a")
    await apply(
        api, path, {**_bare(), "metadata": {"name": "d", "labels": {"team": "x"}}}, fieldManager="b"
    )
    status, after = await apply(api, path, deployment(), fieldManager="a")  # no labels now
    assert status == 200, after
    assert after["metadata"]["labels"] == {"team": "x"}  # tier removed; team still b's


@pytest.mark.asyncio
async def test_a_merge_patch_records_an_update_manager_that_an_apply_conflicts_with(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await apply(api, f"{DEPLOYMENTS}/d", deployment(replicas=1), fieldManager="a")
    headers = {"Content-Type": "application/merge-patch+json"}
    patch = {"spec": {"replicas": 5}}
    async with api.patch(f"{DEPLOYMENTS}/d", json=patch, headers=headers) as response:
        patched = await response.json()
    managed = owners(patched)
    assert ("f:spec", "f:replicas") in managed["Python/Update"]  # the user agent's product
    assert ("f:spec", "f:replicas") not in managed["a/Apply"]
    status, refusal = await apply(api, f"{DEPLOYMENTS}/d", deployment(1), fieldManager="a")
    assert status == 409, refusal
    assert refusal["message"].startswith(
        'Apply failed with 1 conflict: conflict with "Python" using apps/v1 at '
    )


@pytest.mark.asyncio
async def test_custom_resource_list_maps_are_owned_item_by_item(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    path = f"{LLMD_COLLECTION}/chat"
    first = make_llmd()
    first["spec"]["model"]["adapters"] = [{"name": "sql", "source": "file:///a"}]
    status, created = await apply(api, path, first, fieldManager="a")
    assert status in (200, 201), created
    second = {
        **_bare(make_llmd()),
        "spec": {"model": {"adapters": [{"name": "chat", "source": "file:///b"}]}},
    }
    status, merged = await apply(api, path, second, fieldManager="b")
    assert status == 200, merged  # two managers, one item each: no conflict on the list
    assert [a["name"] for a in merged["spec"]["model"]["adapters"]] == ["sql", "chat"]
    stored = live(cluster, LLMD, "chat")
    assert stored is not None and stored["spec"]["replicas"] == 1
    assert "engine" in stored["spec"]  # the CRD's defaults, as for every write


def _bare(obj: dict[str, Any] | None = None) -> dict[str, Any]:
    source = obj or deployment()
    return {
        "apiVersion": source["apiVersion"],
        "kind": source["kind"],
        "metadata": {"name": source["metadata"]["name"]},
    }


def _example(replicas: int) -> str:
    document = yaml.safe_load(EXAMPLE.read_text())
    document = copy.deepcopy(document)
    document["spec"]["replicas"] = replicas
    return yaml.safe_dump(document)


@pytest.mark.asyncio
@needs_kubectl
async def test_kubectl_server_side_apply_conflicts_across_field_managers(
    cluster: Emulator,
) -> None:
    applied = await kubectl_ok("apply", "--server-side", "--validate=false", "-f", str(EXAMPLE))
    assert "serverside-applied" in applied
    other = ("apply", "--server-side", "--validate=false", "--field-manager=other", "-f", "-")
    code, output = await kubectl(*other, stdin=_example(3))
    assert code != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas' in output
    key = ("pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2")
    assert cluster.objects[key].raw["spec"]["replicas"] == 1
    await kubectl_ok(*other, "--force-conflicts", stdin=_example(3))
    stored = cluster.objects[key].raw
    assert stored["spec"]["replicas"] == 3
    assert ("f:spec", "f:replicas") in owners(stored)["other/Apply"]


@pytest.mark.asyncio
@needs_kubectl
async def test_kubectl_moves_from_client_side_to_server_side_apply(cluster: Emulator) -> None:
    await kubectl_ok("apply", "--validate=false", "-f", str(EXAMPLE))
    key = ("pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2")
    assert "kubectl-client-side-apply/Update" in owners(cluster.objects[key].raw)
    await kubectl_ok("apply", "--server-side", "--validate=false", "-f", "-", stdin=_example(2))
    stored = cluster.objects[key].raw
    managed = owners(stored)
    assert stored["spec"]["replicas"] == 2  # no conflict with its own client-side apply
    assert ("f:spec", "f:replicas") in managed["kubectl/Apply"]
    print(json.dumps(stored["metadata"]["managedFields"], indent=1))
