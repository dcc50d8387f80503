"""`helm install` of the chart into an emulated API server through helm-python-sdk (Helm 4's Go
SDK in a shared library), with the two settings the emulator needs that are not about the chart:
the release record kept in memory (`storage_driver="memory"`: client-go writes its Secret as
protobuf, which kmock cannot read) and Helm's client-side OpenAPI validation off
(`disable_openapi_validation`, an option of the library's install that `Config.install` does not
pass, so the library is called as `install` calls it; the emulator serves no `/openapi`)."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
from helm_python import _native

from tests.k8s_operator.chart import CHART


def helm_install(
    kubeconfig: str,
    namespace: str,
    values: dict[str, Any] | None = None,
    create_namespace: bool = False,
) -> dict[str, Any]:
    """`helm install pagedock charts/pagedock -n NAMESPACE [--create-namespace] --set ...`: the
    release summary. A blocking call into Go: run it off the event loop that serves the API."""
    options: dict[str, Any] = {
        "namespace": namespace,
        "timeout_seconds": 30,
        "disable_openapi_validation": True,
    }
    if create_namespace:
        options["create_namespace"] = True
    with helm.Config(
        kubeconfig_path=kubeconfig, namespace=namespace, storage_driver="memory"
    ) as config:
        payload = _native.call_string(
            "helm_install",
            config._raw(),
            config._context_arg(None),
            _native.HANDLE(0),
            str(CHART),
            "pagedock",
            json.dumps(values or {}),
            json.dumps(options),
        )
    release: dict[str, Any] = json.loads(payload)
    return release
