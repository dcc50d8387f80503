"""`helm install` of the chart into the emulated API server with helm-python-sdk (Helm 4's Go SDK
in a shared library): Helm reads discovery and `/version` (the chart's kubeVersion), then
server-side-applies the CRDs and every rendered object; they are all stored.

The settings the emulator needs (tests/k8s_operator/helm_install.py) are not about the chart. The
admission of the objects themselves is the emulator's, as for every write."""

from __future__ import annotations

import asyncio
import os

import kmock
import pytest

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helm_install import helm_install

NAMESPACE = "pagedock-system"
VERBS = {"list", "watch", "get", "patch", "create", "delete", "update"}
CHART_KINDS = {
    "v1/serviceaccounts": ("ServiceAccount", True),
    "v1/configmaps": ("ConfigMap", True),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False),
    "kopf.dev/v1/clusterkopfpeerings": ("ClusterKopfPeering", False),
}


@pytest.mark.asyncio
async def test_helm_installs_the_chart_into_the_emulated_cluster(cluster: Emulator) -> None:
    for resource, (kind, namespaced) in CHART_KINDS.items():
        cluster.resources[resource] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, verbs=VERBS
        )
    # NOTE: a blocking call into Go; the emulator serves on this loop meanwhile.
    release = await asyncio.to_thread(helm_install, os.environ["KUBECONFIG"], NAMESPACE)
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
