"""The CRD: generated from the pydantic models, structural, in sync with the checked-in copies,
and the examples validate against it (and invalid ones do not)."""

from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml
from llm_operator.api.crd import build_crd, crd_yaml
from llm_operator.api.spec import LLMDeploymentSpec

from tests.k8s_operator.validation import validate_custom_resource, validate_kubernetes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
OPENAPI = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, node)]
    for key, child in node.get("properties", {}).items():
        nodes += walk(child, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            nodes += walk(node[key], f"{path}[{key}]")
    return nodes


@pytest.mark.parametrize("path", ["manifests/crd.yaml", "charts/pagedock/crds/crds.yaml"])
def test_checked_in_crds_match_the_generated_ones(path: str) -> None:
    assert (ROOT / path).read_text() == crd_yaml(peering=True), (
        f"{path} is stale: run `python manifests/generate.py`"
    )


def test_crd_is_valid_kubernetes() -> None:
    for document in yaml.safe_load_all(crd_yaml(peering=True)):
        if document:
            validate_kubernetes(document)


def test_schema_is_structural() -> None:
    for path, node in walk(OPENAPI):
        assert not {"$ref", "anyOf", "allOf", "oneOf", "title"} & node.keys(), path
        typed = "type" in node or node.get("x-kubernetes-int-or-string")
        assert typed or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert node.get("type") != "null", path


def test_crd_has_scale_status_and_printer_columns() -> None:
    version = build_crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    assert "status" in version["subresources"]
    columns = {column["name"] for column in version["additionalPrinterColumns"]}
    assert {"Model", "Replicas", "Ready", "Endpoint", "Age"} <= columns


def test_engine_fields_mirror_the_engine_config_names() -> None:
    engine = OPENAPI["properties"]["spec"]["properties"]["engine"]["properties"]
    defaults = {name: field.get("default") for name, field in engine.items()}
    assert defaults["blockSize"] == 16
    assert defaults["maxNumSeqs"] == 256
    assert defaults["maxNumBatchedTokens"] == 2048
    assert defaults["enablePrefixCaching"] is True
    assert engine["dtype"]["enum"] == ["auto", "float32", "float16", "bfloat16"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_examples_validate_against_the_crd_and_the_models(example: Path) -> None:
    obj = yaml.safe_load(example.read_text())
    validate_custom_resource(obj, OPENAPI)
    LLMDeploymentSpec.model_validate(obj["spec"])


INVALID_SPECS = {
    "negative replicas": {"replicas": -1},
    "unknown dtype": {"engine": {"dtype": "int3"}},
    "unknown field": {"engine": {"maxNumSequences": 4}},
    "bad model source": {"model": {"source": "s3://bucket/model"}},
    "zero block size": {"engine": {"blockSize": 0}},
    "bad quantity": {"resources": {"shmSize": "lots"}},
    "unknown autoscaling mode": {"autoscaling": {"mode": "vpa"}},
    "negative min replicas": {"autoscaling": {"minReplicas": -1}},
    "zero target concurrency": {"autoscaling": {"targetConcurrency": 0}},
    "adapter source scheme": {"model": {"adapters": [{"name": "sql", "source": "s3://b/sql"}]}},
    "adapter name not dns": {"model": {"adapters": [{"name": "SQL_", "source": "file:///a"}]}},
    "adapter without source": {"model": {"adapters": [{"name": "sql"}]}},
    "zero max loras": {"engine": {"maxLoras": 0}},
    "unknown responses store": {"responses": {"store": "postgres"}},
    "negative responses ttl": {"responses": {"ttlSeconds": -1}},
    "redis secret without a name": {"responses": {"store": "redis", "redisURLSecret": {}}},
}
CEL_ONLY_SPECS = {
    "adapters with tensor parallelism": {
        "model": {"adapters": [{"name": "sql", "source": "file:///adapters/sql"}]},
        "engine": {"tensorParallelSize": 2},
    },
    "max loras with tensor parallelism": {"engine": {"maxLoras": 2, "tensorParallelSize": 2}},
    "revision of a pvc adapter": {
        "model": {"adapters": [{"name": "a", "source": "pvc://c/a", "revision": "v1"}]}
    },
    "gpus differ from tp": {"resources": {"gpus": 4}, "engine": {"tensorParallelSize": 2}},
    "tls without host": {"ingress": {"enabled": True, "tlsSecretName": "tls"}},
    "autoscaling range": {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}},
    "budget below seqs": {"engine": {"maxNumSeqs": 512, "maxNumBatchedTokens": 256}},
    "path prefix without router": {
        "ingress": {"enabled": True, "path": "/llm"},
        "router": {"enabled": False},
    },
    "hpa to zero": {"autoscaling": {"enabled": True, "mode": "hpa", "minReplicas": 0}},
    "builtin without router": {"autoscaling": {"enabled": True}, "router": {"enabled": False}},
    "zero without router": {
        "autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 0},
        "router": {"enabled": False},
    },
    "redis store without its secret": {"responses": {"store": "redis"}},
    "redis secret for the memory store": {"responses": {"redisURLSecret": {"name": "r"}}},
}


@pytest.mark.parametrize("spec", INVALID_SPECS.values(), ids=INVALID_SPECS.keys())
def test_invalid_specs_are_rejected_by_the_schema(spec: dict[str, Any]) -> None:
    obj = {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": {},
        "spec": spec,
    }
    with pytest.raises(jsonschema.ValidationError):
        validate_custom_resource(obj, OPENAPI)
    with pytest.raises(pydantic.ValidationError):
        LLMDeploymentSpec.model_validate(spec)


@pytest.mark.parametrize("spec", CEL_ONLY_SPECS.values(), ids=CEL_ONLY_SPECS.keys())
def test_cross_field_rules_are_rejected_by_the_models(spec: dict[str, Any]) -> None:
    """CEL rules (which the API server evaluates) have a pydantic twin the operator evaluates."""
    with pytest.raises(pydantic.ValidationError):
        LLMDeploymentSpec.model_validate(spec)


def test_tensor_parallelism_with_one_gpu_per_rank_is_valid() -> None:
    for spec in (
        {"resources": {"gpus": 2}, "engine": {"tensorParallelSize": 2}},
        {"resources": {"gpus": 0}, "engine": {"tensorParallelSize": 2}},  # CPU ranks
    ):
        obj = {"apiVersion": "pagedock.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {}}
        validate_custom_resource({**obj, "spec": spec}, OPENAPI)
        LLMDeploymentSpec.model_validate(spec)


def test_gpus_that_differ_from_the_ranks_name_both_numbers() -> None:
    spec = {"resources": {"gpus": 4}, "engine": {"tensorParallelSize": 2}}
    with pytest.raises(pydantic.ValidationError, match=r"resources\.gpus \(4\) must equal engine"):
        LLMDeploymentSpec.model_validate(spec)


def test_cel_rules_are_in_the_schema() -> None:
    rules = [
        rule["rule"]
        for _, node in walk(OPENAPI)
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert any("tensorParallelSize" in rule for rule in rules)
    assert any("minReplicas >= 1" in rule for rule in rules)
    assert any("priorityClasses" in rule for rule in rules)
    assert len(rules) == 22


def test_autoscaling_defaults_to_the_builtin_autoscaler_and_allows_zero() -> None:
    scaling = OPENAPI["properties"]["spec"]["properties"]["autoscaling"]["properties"]
    assert scaling["mode"]["default"] == "builtin"
    assert scaling["mode"]["enum"] == ["builtin", "hpa", "keda"]
    assert scaling["minReplicas"]["minimum"] == 0
    spec = LLMDeploymentSpec.model_validate({"autoscaling": {"enabled": True, "minReplicas": 0}})
    assert spec.autoscaling.builtin and spec.autoscaling.scale_to_zero_after_seconds == 300
    router = OPENAPI["properties"]["spec"]["properties"]["router"]["properties"]
    assert (router["holdQueueSize"]["default"], router["holdTimeoutSeconds"]["default"]) == (
        256,
        300,
    )


ADAPTERS = [
    {"name": "sql", "source": "hf://org/sql-lora", "revision": "v2"},
    {"name": "support", "source": "pvc://adapters/support"},
    {"name": "poems.v1", "source": "file:///opt/adapters/poems"},
]


def test_adapters_and_lora_settings_validate_in_the_schema_and_the_models() -> None:
    spec = {"model": {"adapters": ADAPTERS}, "engine": {"maxLoras": 2, "maxLoraRank": 32}}
    obj = {"apiVersion": "pagedock.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {}}
    validate_custom_resource({**obj, "spec": spec}, OPENAPI)
    parsed = LLMDeploymentSpec.model_validate(spec)
    assert [a.name for a in parsed.model.adapters] == ["sql", "support", "poems.v1"]
    assert (parsed.engine.max_loras, parsed.engine.max_lora_rank) == (2, 32)


def test_adapter_names_are_a_list_map_so_the_api_server_refuses_a_name_twice() -> None:
    adapters = OPENAPI["properties"]["spec"]["properties"]["model"]["properties"]["adapters"]
    assert adapters["x-kubernetes-list-type"] == "map"
    assert adapters["x-kubernetes-list-map-keys"] == ["name"]
    twice = [{"name": "sql", "source": "file:///a"}, {"name": "sql", "source": "file:///b"}]
    with pytest.raises(pydantic.ValidationError, match="the name sql is declared twice"):
        LLMDeploymentSpec.model_validate({"model": {"adapters": twice}})


def test_status_lists_adapters_and_kubectl_get_shows_ready_of_declared() -> None:
    version = build_crd()["spec"]["versions"][0]
    [column] = [c for c in version["additionalPrinterColumns"] if c["name"] == "Adapters"]
    assert column == {"name": "Adapters", "type": "string", "jsonPath": ".status.adaptersReady"}
    status = OPENAPI["properties"]["status"]["properties"]
    entry = status["adapters"]["items"]["properties"]
    assert entry["state"]["enum"] == ["Downloading", "Loading", "Ready", "Failed"]
    assert {"name", "reason", "message", "readyReplicas"} <= entry.keys()
