"""autoscaling.mode keda: the ScaledObject the operator renders, validated against a schema
written here from KEDA's ScaledObject reference (keda.sh/docs/latest/reference/scaledobject-spec
and the prometheus and cpu scaler pages): the fields KEDA documents, their types, what is
mandatory, and the rules it states in prose (idleReplicaCount below minReplicaCount; trigger
metadata values are strings)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.settings import OperatorSettings

STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
TRIGGER = {
    "type": "object",
    "required": ["type", "metadata"],
    "additionalProperties": False,
    "properties": {
        "type": {"type": "string", "minLength": 1},
        "name": {"type": "string"},
        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
        "useCachedMetrics": {"type": "boolean"},
        "metadata": STRING_MAP,
        "authenticationRef": {"type": "object", "required": ["name"]},
    },
    "allOf": [
        {
            "if": {"properties": {"type": {"const": "prometheus"}}},
            "then": {
                "properties": {"metadata": {"required": ["serverAddress", "query", "threshold"]}}
            },
        },
        {
            "if": {"properties": {"type": {"const": "cpu"}}},
            "then": {
                "required": ["metricType"],
                "properties": {
                    "metricType": {"enum": ["Utilization", "AverageValue"]},
                    "metadata": {"required": ["value"]},
                },
            },
        },
    ],
}
SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "const": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {"type": "object", "required": ["failureThreshold", "replicas"]},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "scaleUp": {"type": "object"},
                                        "scaleDown": {"type": "object"},
                                    },
                                },
                            },
                        },
                        "scalingModifiers": {"type": "object"},
                    },
                },
                "triggers": {"type": "array", "minItems": 1, "items": TRIGGER},
            },
        },
    },
}


def scaled_object(autoscaling: dict[str, Any]) -> dict[str, Any]:
    spec = LLMDeploymentSpec.model_validate(
        {"autoscaling": {"enabled": True, "mode": "keda", **autoscaling}}
    )
    children = build_children(BuildContext("chat", "team-a", spec, OperatorSettings()))
    [found] = [c for c in children if c["kind"] == "ScaledObject"]
    assert not [c for c in children if c["kind"] == "HorizontalPodAutoscaler"]
    return found


def check(obj: dict[str, Any]) -> None:
    jsonschema.validate(obj, SCALED_OBJECT_SCHEMA)
    spec = obj["spec"]
    if "idleReplicaCount" in spec:  # "must be less than minReplicaCount"
        assert spec["idleReplicaCount"] < spec.get("minReplicaCount", 0)
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)


@pytest.mark.parametrize(
    "autoscaling",
    [{}, {"minReplicas": 0, "scaleToZeroAfterSeconds": 60}, {"targetCPUUtilizationPercentage": 70}],
    ids=["defaults", "to-zero", "with-cpu"],
)
def test_the_scaled_object_matches_kedas_reference(autoscaling: dict[str, Any]) -> None:
    check(scaled_object(autoscaling))


def test_the_scaled_object_scales_the_llmdeployment_to_zero_after_the_idle_time() -> None:
    spec = scaled_object({"minReplicas": 0, "maxReplicas": 6, "scaleToZeroAfterSeconds": 90})[
        "spec"
    ]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "name": "chat",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"]) == (0, 6, 90)
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus"
    assert 'namespace="team-a"' in trigger["metadata"]["query"]
    assert trigger["metadata"]["threshold"] == "4"


def test_the_schema_catches_what_keda_would_refuse() -> None:
    good = scaled_object({})
    bad_trigger = {
        **good,
        "spec": {
            **good["spec"],
            "triggers": [{"type": "prometheus", "metadata": {"threshold": 4}}],
        },
    }
    typo = {**good, "spec": {**good["spec"], "maxReplicas": 3}}
    for obj in (bad_trigger, typo):
        with pytest.raises(jsonschema.ValidationError):
            check(obj)
