"""The resources the operator tests' emulator serves (kmock's discovery: kinds, scopes, verbs,
subresources, short names), and the printer columns of the custom resources among them."""

import kmock
from llm_operator.api.crd import build_crd

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "pagedock.dev/v1alpha1/llmdeployments": kmock.ResourceInfo(
        kind="LLMDeployment",
        singular="llmdeployment",
        shortnames={"llmd"},
        categories={"all", "pagedock"},
        namespaced=True,
        subresources={"status", "scale"},
        verbs={"list", "watch", "get", "patch", "create", "delete", "update"},
    ),
    "apiextensions.k8s.io/v1/customresourcedefinitions": kmock.ResourceInfo(
        kind="CustomResourceDefinition",
        namespaced=False,
        verbs={"list", "watch", "get", "create", "patch"},
    ),
    "v1/namespaces": kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"list", "watch", "get"}
    ),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create"}),
    "apps/v1/deployments": kmock.ResourceInfo(
        kind="Deployment",
        namespaced=True,
        subresources={"status", "scale"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/services": kmock.ResourceInfo(
        kind="Service",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/pods": kmock.ResourceInfo(
        kind="Pod",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "batch/v1/jobs": kmock.ResourceInfo(
        kind="Job",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/secrets": kmock.ResourceInfo(
        kind="Secret", namespaced=True, verbs={"list", "watch", "get", "create"}
    ),
    "v1/persistentvolumeclaims": kmock.ResourceInfo(
        kind="PersistentVolumeClaim",
        namespaced=True,
        verbs={"list", "watch", "get", "create"},
    ),
}
PRINTER_COLUMNS: dict[str, list[dict[str, object]]] = {
    "pagedock.dev/v1alpha1/llmdeployments": build_crd()["spec"]["versions"][0][
        "additionalPrinterColumns"
    ],
}
