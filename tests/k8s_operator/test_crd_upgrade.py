"""The CRD upgrade that docs/kubernetes.md gives (Helm never upgrades `crds/`), run with kubectl
against kmock: an installed older CRD is replaced by the chart's."""

import asyncio
import copy
import shutil
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import send

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl"),
]
ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "charts" / "pagedock" / "crds" / "crds.yaml"
CRD_COLLECTION = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# NOTE: the command docs/kubernetes.md gives for `helm upgrade`.
UPGRADE = ["apply", "--server-side", "--force-conflicts", "--validate=false", "-f", str(CRDS)]


def older(crd: dict) -> dict:
    """The CRD as an older chart had it: one spec field fewer."""
    old = copy.deepcopy(crd)
    spec = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["podAnnotations"]
    return old


async def test_the_documented_upgrade_replaces_an_installed_older_crd(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    crds = [doc for doc in yaml.safe_load_all(CRDS.read_text()) if doc]
    assert (
        "kubectl apply --server-side --force-conflicts -f"
        in (ROOT / "docs" / "kubernetes.md").read_text()
    )
    for crd in crds:  # what `helm install` of an older chart left
        await send(
            api,
            "POST",
            CRD_COLLECTION,
            older(crd) if crd["spec"]["group"] == "pagedock.dev" else crd,
        )
    name = crds[0]["metadata"]["name"]
    key = ("apiextensions.k8s.io/v1/customresourcedefinitions", None, name)
    assert cluster.objects[key].raw["spec"]["versions"] != crds[0]["spec"]["versions"]
    process = await asyncio.create_subprocess_exec(
        "kubectl", *UPGRADE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()
    assert cluster.objects[key].raw["spec"]["versions"] == crds[0]["spec"]["versions"]
    patches = list(cluster["patch"])
    assert patches and all(
        p.headers["Content-Type"].startswith("application/apply-patch") for p in patches
    )
