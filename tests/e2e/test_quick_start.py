"""Issue 41: docs/kubernetes.md's quick start, run as written with the real clients against the
emulated cluster: `helm install` of the chart (helm-python-sdk: Helm 4's Go SDK) with the
images named by `--set`, `kubectl apply -f manifests/examples/llmdeployment.yaml`,
`kubectl wait llmd/smollm2 --for=condition=Ready`, then the chat. Where it departs from the
page: the namespace is made by the harness (kmock's path parser fails on POST
/api/v1/namespaces, from kubectl as from Helm); the images are the local builds
(`localhost/pagedock/*:dev`, no registry to push to); the chart gets the e2e's one replica and
short resync; and `kubectl port-forward` (a streaming subresource the emulated API server does
not serve) becomes the chat to the router pod's IP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.e2e.cluster import ADMIN_TOKEN, EXAMPLE, REPO, Cluster, chat
from tests.k8s_operator.helm_install import helm_install
from tests.k8s_operator.kubectl import kubectl_ok, needs_kubectl
from tests.kubeconfig import write_kubeconfig

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900), needs_kubectl]
DOC = REPO / "docs" / "kubernetes.md"
# `--set image.repository=... --set image.tag=...` with the local builds; what the other
# scenarios give the operator (tests/e2e/cluster.py's OPERATOR_ENV) through the chart's values.
VALUES = {
    "image": {"repository": "localhost/pagedock", "tag": "dev"},
    "replicaCount": 1,
    "resyncSeconds": 5,
}


async def test_the_quick_start_runs_with_helm_and_kubectl(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = DOC.read_text()
    for step in (
        "helm install pagedock charts/pagedock -n pagedock-system --create-namespace",
        "kubectl apply -f manifests/examples/llmdeployment.yaml",
        "kubectl wait llmd/smollm2 --for=condition=Ready --timeout=10m",
    ):
        assert step in page, f"docs/kubernetes.md's quick start no longer says: {step}"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster.url, ADMIN_TOKEN)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    # NOTE: `--create-namespace` by the harness: kmock's path parser reads POST
    # /api/v1/namespaces as a namespaced path and fails (500), with kubectl as with Helm.
    cluster.api.add_namespace("pagedock-system")
    # NOTE: a blocking call into Go; the API server serves on this loop meanwhile.
    release = await asyncio.to_thread(helm_install, str(kubeconfig), "pagedock-system", VALUES)
    assert release["status"] == "deployed", release
    # (--validate=false: the emulated API server serves no /openapi for kubectl to check with)
    await kubectl_ok("apply", "--validate=false", "-f", str(EXAMPLE))
    await kubectl_ok("wait", "llmd/smollm2", "--for=condition=Ready", "--timeout=420s")
    [router] = cluster.kubelet.pods("smollm2-router-")
    reply = await chat(router.ip, 8080, "Hi")
    assert reply["model"] == "smollm2-135m-instruct"
    assert reply["choices"][0]["message"]["content"]
    listed = await kubectl_ok("get", "llmd", "smollm2", "-o", "wide")
    assert "smollm2-135m-instruct" in listed, listed
