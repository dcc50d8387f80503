"""`helm install` of the chart into the emulated API server with helm-python-sdk (Helm 4's Go SDK
in a shared library): Helm reads discovery and `/version` (the chart's kubeVersion), then
server-side-applies the CRDs and every rendered object; they are all stored.

Two settings it needs here, neither about the chart: the release record is kept in memory
(`storage_driver="memory"`), since client-go writes the record's Secret as protobuf, which the
emulator (kmock) cannot read; and Helm's client-side OpenAPI validation is off
(`disable_openapi_validation`, an option of the library's install that helm-python-sdk's
`Config.install` does not pass, so the test calls the library as `install` does), since the
emulator serves no `/openapi/v2` or `/openapi/v3`. The admission of the objects themselves is
the emulator's, as for every write."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import helm_python as helm
import kmock
import pytest
from helm_python import _native

from tests.k8s_operator.chart import CHART
from tests.k8s_operator.emulator import Emulator

NAMESPACE = "pagedock-system"
VERBS = {"list", "watch", "get", "patch", "create", "delete", "update"}
CHART_KINDS = {
    "v1/serviceaccounts": ("ServiceAccount", True),
    "v1/configmaps": ("ConfigMap", True),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False),
    "kopf.dev/v1/clusterkopfpeerings": ("ClusterKopfPeering", False),
}


def install(kubeconfig: str) -> dict[str, Any]:
    """What `helm install pagedock charts/pagedock -n pagedock-system` does, through the library
    (Config.install's call, with `disable_openapi_validation` added)."""
    options = {"namespace": NAMESPACE, "timeout_seconds": 30, "disable_openapi_validation": True}
    with helm.Config(
        kubeconfig_path=kubeconfig, namespace=NAMESPACE, storage_driver="memory"
    ) as config:
        payload = _native.call_string(
            "helm_install",
            config._raw(),
            config._context_arg(None),
            _native.HANDLE(0),
            str(CHART),
            "pagedock",
            "{}",
            json.dumps(options),
        )
    release: dict[str, Any] = json.loads(payload)
    return release


@pytest.mark.asyncio
async def test_helm_installs_the_chart_into_the_emulated_cluster(cluster: Emulator) -> None:
    for resource, (kind, namespaced) in CHART_KINDS.items():
        cluster.resources[resource] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, verbs=VERBS
        )
    # NOTE: a blocking call into Go; the emulator serves on this loop meanwhile.
    release = await asyncio.to_thread(install, os.environ["KUBECONFIG"])
    assert release["status"] == "deployed", release
    stored = {
        f"{resource.plural}/{name}": obj.raw
        for (resource, _, name), obj in list(cluster.objects.items())
        if not obj.deleted
    }
    assert {
        "customresourcedefinitions/llmdeployments.pagedock.dev",
        "serviceaccounts/pagedock",
        "clusterroles/pagedock",
        "clusterrolebindings/pagedock",
        "deployments/pagedock",
    } <= stored.keys()
    operator = stored["deployments/pagedock"]
    assert operator["metadata"]["namespace"] == NAMESPACE
    assert operator["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    [entry] = operator["metadata"]["managedFields"]
    assert entry["operation"] == "Apply"  # Helm 4 installs with server-side apply
