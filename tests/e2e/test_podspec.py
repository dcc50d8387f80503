"""How the kubelet stand-in reads a pod spec (runs in `make test`)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.e2e.labels import matches_selector
from tests.e2e.podspec import (
    ContainerConfigError,
    ImageConfig,
    command_line,
    environment,
    probes,
)

IMAGE = ImageConfig(["pagedock"], ["serve"], {"HOME": "/tmp", "A": "image"}, (1, 1), "/tmp")
POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}, "status": {"podIP": "10.0.0.2"}}
OBJECTS = {
    ("v1/configmaps", "cm"): {"kind": "ConfigMap", "data": {"A": "cm", "B": "b"}},
    ("v1/secrets", "s"): {"kind": "Secret", "data": {"K": base64.b64encode(b"key").decode()}},
}


def lookup(resource: str, name: str) -> dict | None:
    return OBJECTS.get((resource, name))


def test_args_replace_cmd_and_command_replaces_the_entrypoint() -> None:
    assert command_line({"args": ["route"]}, IMAGE) == ["pagedock", "route"]
    assert command_line({}, IMAGE) == ["pagedock", "serve"]
    assert command_line({"command": ["sh"], "args": ["-c"]}, IMAGE) == ["sh", "-c"]


def test_env_is_image_then_env_from_then_env_with_value_from() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}}],
        "env": [
            {"name": "B", "value": "env"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "K"}}},
        ],
    }
    env = environment(POD, container, IMAGE, lookup)
    assert (env["A"], env["B"], env["IP"], env["KEY"], env["HOME"]) == (
        "cm",
        "env",
        "10.0.0.2",
        "key",
        "/tmp",
    )


def test_a_missing_config_map_is_a_config_error() -> None:
    with pytest.raises(ContainerConfigError, match='"gone" not found'):
        environment(POD, {"envFrom": [{"configMapRef": {"name": "gone"}}]}, IMAGE, lookup)


def test_probe_ports_by_name_and_periods_scaled() -> None:
    container: dict[str, Any] = {
        "name": "engine",
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
    }
    [probe] = probes(container, 0.2)
    assert (probe.kind, probe.path, probe.port, probe.period_s) == (
        "readiness",
        "/health",
        8000,
        1.0,
    )
    container["readinessProbe"]["httpGet"]["port"] = "metrics"
    with pytest.raises(ContainerConfigError, match="no port named"):
        probes(container, 0.2)


def test_label_selectors() -> None:
    labels = {"app": "pagedock", "component": "engine"}
    assert matches_selector(labels, "app=pagedock,component in (engine, router)")
    assert not matches_selector(labels, "app=pagedock,!component")
    assert matches_selector(labels, "")
