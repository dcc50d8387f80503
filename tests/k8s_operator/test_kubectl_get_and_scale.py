"""`kubectl get llmd` shows the CRD's printer columns (the emulator answers kubectl's Table
request: printer_columns.py) and `kubectl scale` goes through the scale subresource
(scale_subresource.py)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import send
from tests.k8s_operator.kubectl import kubectl_ok, needs_kubectl
from tests.k8s_operator.printer_columns import json_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "llmdeployment.yaml"
LLMDS = "/apis/pagedock.dev/v1alpha1/namespaces/default/llmdeployments"
KEY = ("pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2")


def test_a_filter_in_a_column_path_picks_the_condition() -> None:
    obj = {
        "status": {"conditions": [{"type": "A", "reason": "x"}, {"type": "Ready", "reason": "y"}]}
    }
    assert json_path(obj, '.status.conditions[?(@.type=="Ready")].reason') == "y"
    assert json_path(obj, ".status.conditions[0].type") == "A"
    assert json_path(obj, ".status.missing") is None


@pytest.mark.asyncio
@needs_kubectl
async def test_kubectl_get_shows_the_printer_columns(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await kubectl_ok("apply", "--server-side", "--validate=false", "-f", str(EXAMPLE))
    ready = {"type": "Ready", "status": "True", "reason": "AllReady", "message": ""}
    ready["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    status = {"model": "smollm2-135m-instruct", "readyReplicas": 1, "conditions": [ready]}
    await send(api, "PATCH", f"{LLMDS}/smollm2/status", {"status": status})
    output = await kubectl_ok("get", "llmd")
    header, row = output.strip().splitlines()[-2:]
    assert header.split() == ["NAME", "MODEL", "REPLICAS", "READY", "ADAPTERS", "ENDPOINT", "AGE"]
    assert row.split()[:4] == ["smollm2", "smollm2-135m-instruct", "1", "1"]
    wide = await kubectl_ok("get", "llmd", "smollm2", "-o", "wide")
    header, row = wide.strip().splitlines()[-2:]
    assert "STATUS" in header.split() and "AllReady" in row.split()


@pytest.mark.asyncio
@needs_kubectl
async def test_kubectl_scale_writes_the_scale_subresource(cluster: Emulator) -> None:
    await kubectl_ok("apply", "--server-side", "--validate=false", "-f", str(EXAMPLE))
    output = await kubectl_ok("scale", "llmd", "smollm2", "--replicas=3")
    assert "scaled" in output
    [patch] = [r for r in list(cluster["patch"]) if r.url.path.endswith("/scale")]
    assert json.loads(patch.text) == {"spec": {"replicas": 3}}  # as kubectl sent it
    assert cluster.objects[KEY].raw["spec"]["replicas"] == 3
