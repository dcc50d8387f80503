"""Validation helpers: Kubernetes schemas (kubernetes-validate, strict) and the CRD's own schema."""

import copy
from typing import Any

import jsonschema
import kubernetes_validate

from tests.k8s_operator.gateway_schemas import SCHEMAS as GATEWAY_SCHEMAS
from tests.k8s_operator.monitoring_schemas import SCHEMAS as MONITORING_SCHEMAS

KUBERNETES_VERSION = kubernetes_validate.latest_version()
# Kinds whose schemas only their CRDs know (not part of Kubernetes itself).
CUSTOM_API_GROUPS = ("kopf.dev/", "pagedock.dev/")
MONITORING_API_VERSION = "monitoring.coreos.com/v1"


def validate_kubernetes(obj: dict[str, Any]) -> None:
    """Raise kubernetes_validate.ValidationError unless obj is valid; unknown fields fail too."""
    if obj["apiVersion"].startswith(CUSTOM_API_GROUPS):
        return
    if obj["apiVersion"] == MONITORING_API_VERSION:  # PrometheusRule, ServiceMonitor
        jsonschema.validate(obj, MONITORING_SCHEMAS[obj["kind"]])
        return
    if obj["apiVersion"] in GATEWAY_SCHEMAS:  # InferencePool, HTTPRoute (tests' own schemas)
        jsonschema.validate(obj, GATEWAY_SCHEMAS[obj["apiVersion"]])
        return
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def crd_json_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    """The CRD's openAPIV3Schema as JSON Schema, rejecting unknown fields (as kubectl's strict
    field validation does; the API server would prune them silently)."""
    schema = copy.deepcopy(openapi)
    _close_objects(schema)
    return schema


def _close_objects(node: dict[str, Any]) -> None:
    for key in [key for key in node if key.startswith("x-kubernetes-")]:
        if key == "x-kubernetes-preserve-unknown-fields":
            continue
        node.pop(key)
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(exclusive) is True:  # OpenAPI v3.0's form; JSON Schema's is the number
            node[exclusive] = node.pop(bound)
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        node.setdefault("additionalProperties", False)
    for child in node.get("properties", {}).values():
        _close_objects(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _close_objects(node[key])


def validate_custom_resource(obj: dict[str, Any], openapi: dict[str, Any]) -> None:
    jsonschema.validate(obj, crd_json_schema(openapi))
