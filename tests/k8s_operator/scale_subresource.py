"""The scale subresource as the API server serves it: a GET of, or a write to, `<object>/scale`
answers an `autoscaling/v1` Scale (spec.replicas, status.replicas and the label selector as a
string), which `kubectl scale` decodes. A write's `{"spec": {"replicas": N}}` reaches the object's
own replicas (`.spec.replicas` for a Deployment and for the CRD's `specReplicasPath`), so the
emulator stores it as a merge patch of the object."""

from __future__ import annotations

from typing import Any

from tests.k8s_operator.printer_columns import json_path

Obj = dict[str, Any]
SELECTOR_PATHS = {"LLMDeployment": ".status.selector"}
"""The CRDs' `labelSelectorPath` by kind (a built-in kind's selector is spec.selector)."""


def scale_of(obj: Obj) -> Obj:
    meta = obj.get("metadata", {})
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": _selector(obj),
        },
    }


def _selector(obj: Obj) -> str:
    path = SELECTOR_PATHS.get(obj.get("kind", ""))
    if path is not None:
        return str(json_path(obj, path) or "")
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
