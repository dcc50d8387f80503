"""PUT (replace) in the emulator (replace.py): the body is the new object, its resourceVersion a
precondition, admission and the status subresource as for the other writes; and `kubectl
replace`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
import yaml

from tests.k8s_operator.admission import Admission
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, live, make_llmd, send
from tests.k8s_operator.kubectl import kubectl_ok, needs_kubectl
from tests.k8s_operator.test_admission import WIDGET_COLLECTION, WIDGETS, widget, widget_crd

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = "/apis/apps/v1/namespaces/team-a/deployments"


def deployment(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team-a", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "engine", "image": "engine:1"}]},
            },
        },
    }


async def put(
    api: aiohttp.ClientSession, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with api.put(path, json=body) as response:
        return response.status, await response.json()


async def test_a_put_replaces_the_whole_object_and_keeps_what_the_server_owns(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    created = await send(api, "POST", DEPLOYMENTS, deployment(tier="web", team="x"))
    body = deployment(team="x")  # no tier: a replace drops it, where a merge patch keeps it
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    body["spec"]["replicas"] = 3
    status, replaced = await put(api, f"{DEPLOYMENTS}/d", body)
    assert status == 200, replaced
    assert replaced["metadata"]["labels"] == {"team": "x"}
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["metadata"]["generation"] == created["metadata"]["generation"] + 1
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    [update] = [e for e in replaced["metadata"]["managedFields"] if e["operation"] == "Update"]
    assert update["fieldsV1"]["f:spec"]["f:replicas"] == {}


async def test_a_stale_resource_version_is_a_conflict_and_none_is_unconditional(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    created = await send(api, "POST", DEPLOYMENTS, deployment())
    await send(api, "PATCH", f"{DEPLOYMENTS}/d", {"metadata": {"labels": {"a": "1"}}})
    stale = deployment(a="2")
    stale["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, refusal = await put(api, f"{DEPLOYMENTS}/d", stale)
    assert status == 409, refusal
    assert refusal["message"] == (
        'Operation cannot be fulfilled on deployments.apps "d": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    status, replaced = await put(api, f"{DEPLOYMENTS}/d", deployment(a="3"))
    assert status == 200, replaced  # a built-in kind allows an unconditional update
    assert replaced["metadata"]["labels"] == {"a": "3"}


async def test_a_custom_resource_needs_a_resource_version_a_name_and_an_object(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    status, refusal = await put(api, f"{LLMD_COLLECTION}/chat", make_llmd())
    assert status == 422, refusal
    assert refusal["message"] == (
        'LLMDeployment.pagedock.dev "chat" is invalid: metadata.resourceVersion: Invalid value: '
        "0x0: must be specified for an update"
    )
    status, refusal = await put(api, f"{LLMD_COLLECTION}/chat", make_llmd("other"))
    assert status == 400, refusal
    assert "does not match the name on the URL (chat)" in refusal["message"]
    status, refusal = await put(api, f"{LLMD_COLLECTION}/missing", make_llmd("missing"))
    assert status == 404, refusal


async def test_a_put_goes_through_admission_with_defaults_and_rules(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    created = await send(api, "POST", LLMD_COLLECTION, make_llmd())
    body = make_llmd(replicas=2)
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, replaced = await put(api, f"{LLMD_COLLECTION}/chat", body)
    assert status == 200, replaced
    assert replaced["spec"]["replicas"] == 2 and "engine" in replaced["spec"]  # defaulted
    invalid = make_llmd(autoscaling={"minReplicas": 5, "maxReplicas": 2})
    invalid["metadata"]["resourceVersion"] = replaced["metadata"]["resourceVersion"]
    status, refusal = await put(api, f"{LLMD_COLLECTION}/chat", invalid)
    assert status == 422, refusal
    assert live(cluster, LLMD, "chat")["spec"]["replicas"] == 2  # type: ignore[index]


async def test_a_put_is_held_to_transition_rules(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    cluster.resources[WIDGETS] = kmock.ResourceInfo(
        kind="Widget", namespaced=True, verbs={"get", "create", "update"}
    )
    cluster.admissions[WIDGETS] = Admission(widget_crd())
    created = await send(api, "POST", WIDGET_COLLECTION, widget(size=5))
    smaller = widget(size=3)
    smaller["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, refusal = await put(api, f"{WIDGET_COLLECTION}/w", smaller)
    assert status == 422, refusal
    assert refusal["message"].endswith("size may not shrink from 5")


async def test_with_a_status_subresource_a_put_changes_either_the_spec_or_the_status(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    created = await send(api, "POST", LLMD_COLLECTION, make_llmd())
    body = copy.deepcopy(created)
    body["spec"]["replicas"] = 2
    body["status"] = {"readyReplicas": 7}
    status, replaced = await put(api, f"{LLMD_COLLECTION}/chat", body)
    assert status == 200, replaced
    assert replaced["spec"]["replicas"] == 2 and "readyReplicas" not in replaced.get("status", {})
    body = copy.deepcopy(replaced)
    body["spec"]["replicas"] = 9
    body["status"] = {"readyReplicas": 1}
    status, replaced = await put(api, f"{LLMD_COLLECTION}/chat/status", body)
    assert status == 200, replaced
    assert replaced["spec"]["replicas"] == 2 and replaced["status"]["readyReplicas"] == 1


@needs_kubectl
async def test_kubectl_replace_puts_the_file(cluster: Emulator) -> None:
    example = ROOT / "manifests" / "examples" / "llmdeployment.yaml"
    await kubectl_ok("apply", "--server-side", "--validate=false", "-f", str(example))
    document = yaml.safe_load(example.read_text())
    document["spec"]["replicas"] = 4
    output = await kubectl_ok(
        "replace", "--validate=false", "-f", "-", stdin=yaml.safe_dump(document)
    )
    assert "replaced" in output
    [put_request] = list(cluster["put"])
    assert put_request.url.path.endswith("/llmdeployments/smollm2")
    stored = cluster.objects["pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2"].raw
    assert stored["spec"]["replicas"] == 4
