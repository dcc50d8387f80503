"""spec.tenancy and spec.router.flowControl: what the schema refuses, what the models refuse (the
CEL rules' twins), and the messages that name what to change."""

from typing import Any

import jsonschema
import pydantic
import pytest
from llm_operator.api.spec import LLMDeploymentSpec

from tests.k8s_operator.test_crd import OPENAPI, walk
from tests.k8s_operator.validation import validate_custom_resource

SPEC = OPENAPI["properties"]["spec"]["properties"]
TENANCY = SPEC["tenancy"]


def tenancy(*tenants: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"tenancy": {"tenants": list(tenants), **fields}}


def tenant(name: str = "chat", secret: str = "chat-key", **fields: Any) -> dict[str, Any]:
    return {"name": name, "apiKeySecrets": [{"name": secret}], **fields}


def custom_resource(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "pagedock.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {}, **spec}


def test_a_full_tenancy_validates_in_the_schema_and_the_models() -> None:
    spec = {
        **tenancy(
            tenant("chat", priority="interactive", requestsPerMinute=600, maxConcurrency=16),
            tenant("batch", "batch-key", priority=20, tokensPerMinute=100000),
            tenant("eval", "eval-key"),
            priorityClasses={"interactive": 0, "batch": 10},
            defaultPriority="batch",
            fairness="fcfs",
            tenantHeader="x-tenant",
        ),
        "router": {"flowControl": {"maxInflightPerReplica": 0, "queueTTLSeconds": 0.5}},
    }
    validate_custom_resource(custom_resource({"spec": spec}), OPENAPI)
    parsed = LLMDeploymentSpec.model_validate(spec)
    assert parsed.tenancy is not None and parsed.tenancy.fairness == "fcfs"
    assert [t.priority for t in parsed.tenancy.tenants] == ["interactive", 20, None]
    assert parsed.tenancy.tenants[0].api_key_secrets[0].key == "api-key"  # SecretKeyRef's default
    assert parsed.router.flow_control is not None
    assert parsed.router.flow_control.queue_ttl_seconds == 0.5


def test_tenancy_is_off_and_fairness_defaults_to_vtc() -> None:
    assert LLMDeploymentSpec.model_validate({}).tenancy is None
    parsed = LLMDeploymentSpec.model_validate(tenancy(tenant()))
    assert parsed.tenancy is not None and parsed.tenancy.fairness == "vtc"
    assert TENANCY["properties"]["fairness"]["default"] == "vtc"


INVALID = {
    "no tenant": tenancy(),
    "tenants missing": {"tenancy": {"fairness": "vtc"}},
    "unknown fairness": tenancy(tenant(), fairness="wfq"),
    "name not a label value": tenancy(tenant("chat team")),
    "name ends with a dash": tenancy(tenant("chat-")),
    "name too long": tenancy(tenant("a" * 64)),
    "zero requests per minute": tenancy(tenant(requestsPerMinute=0)),
    "zero tokens per minute": tenancy(tenant(tokensPerMinute=0)),
    "zero concurrency": tenancy(tenant(maxConcurrency=0)),
    "secret name not dns": tenancy(tenant(secret="Chat_Key")),
    "secret key with a slash": tenancy(
        {"name": "a", "apiKeySecrets": [{"name": "s", "key": "a/b"}]}
    ),
    "bad tenant header": tenancy(tenant(), tenantHeader="x tenant"),
    "class priority not an int": tenancy(tenant(), priorityClasses={"batch": "low"}),
    "unknown tenant field": tenancy(tenant(apiKeys=["sk-1"])),
    "negative in-flight slots": {"router": {"flowControl": {"maxInflightPerReplica": -1}}},
    "zero queue size": {"router": {"flowControl": {"queueSize": 0}}},
    "zero queue ttl": {"router": {"flowControl": {"queueTTLSeconds": 0}}},
    "zero starvation bound": {"router": {"flowControl": {"starvationSeconds": 0}}},
}


@pytest.mark.parametrize("spec", INVALID.values(), ids=INVALID.keys())
def test_invalid_tenancy_is_rejected_by_the_schema_and_the_models(spec: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate_custom_resource(custom_resource({"spec": spec}), OPENAPI)
    with pytest.raises(pydantic.ValidationError):
        LLMDeploymentSpec.model_validate(spec)


# Rules the API server checks with CEL or a list-map key (which jsonschema does not evaluate);
# the models refuse the same, with a message that names the culprit.
CROSS_FIELD = {
    "unknown class": (
        tenancy(tenant("chat", priority="gold"), priorityClasses={"interactive": 0}),
        r"tenants chat: priority 'gold' is not in tenancy.priorityClasses \(interactive\)",
    ),
    "class without classes": (
        tenancy(tenant("chat", priority="gold")),
        r"priority 'gold' is not in tenancy.priorityClasses \(none are declared\)",
    ),
    "unknown default class": (
        tenancy(tenant(), defaultPriority="batch", priorityClasses={"interactive": 0}),
        r"tenancy.defaultPriority 'batch' is not in tenancy.priorityClasses",
    ),
    "a name twice": (
        tenancy(tenant("chat"), tenant("chat", "other-key")),
        "the name chat is declared twice",
    ),
    "the reserved name": (tenancy(tenant("default")), "the name default is reserved"),
    "a tenant without keys or header": (
        tenancy({"name": "chat"}),
        "tenants chat: no apiKeySecrets, and no tenantHeader",
    ),
    "a redis quota store without its secret": (
        tenancy(tenant(), quotaStore="redis"),
        r"tenancy.quotaStore redis needs tenancy.quotaRedisURLSecret",
    ),
    "a redis quota secret for the memory store": (
        tenancy(tenant(), quotaRedisURLSecret={"name": "quota-redis"}),
        r"tenancy.quotaRedisURLSecret is for tenancy.quotaStore redis",
    ),
    "one key for two tenants": (
        tenancy(tenant("a", "shared"), tenant("b", "shared")),
        r"the API key in Secret shared \(key api-key\) is listed twice \(tenants a and b\)",
    ),
}


@pytest.mark.parametrize("case", CROSS_FIELD.values(), ids=CROSS_FIELD.keys())
def test_cross_field_tenancy_rules_are_refused_by_the_models_naming_the_culprit(
    case: tuple[dict[str, Any], str],
) -> None:
    spec, message = case
    with pytest.raises(pydantic.ValidationError, match=message):
        LLMDeploymentSpec.model_validate(spec)


def test_a_tenant_without_keys_is_valid_behind_a_tenant_header() -> None:
    spec = tenancy({"name": "chat"}, tenantHeader="x-tenant")
    validate_custom_resource(custom_resource({"spec": spec}), OPENAPI)
    LLMDeploymentSpec.model_validate(spec)


def test_the_api_server_checks_classes_keys_and_unique_names() -> None:
    rules = {rule["rule"]: rule for rule in TENANCY["x-kubernetes-validations"]}
    tenants_rule = next(rule for text, rule in rules.items() if text.startswith("self.tenants.all"))
    assert "t.priority in self.priorityClasses" in tenants_rule["rule"]
    # the message names the tenant and its class: "tenant chat: priority gold is not in ..."
    assert "'tenant ' + t.name" in tenants_rule["messageExpression"]
    assert any("self.defaultPriority in self.priorityClasses" in text for text in rules)
    assert any("has(self.tenantHeader)" in text for text in rules)
    assert "self.tenants.all(t, t.name != 'default')" in rules
    tenants = TENANCY["properties"]["tenants"]
    assert tenants["x-kubernetes-list-type"] == "map"
    assert tenants["x-kubernetes-list-map-keys"] == ["name"]
    assert tenants["minItems"] == 1 and TENANCY["required"] == ["tenants"]


def test_cel_rules_over_lists_and_maps_are_bounded() -> None:
    """The API server estimates a rule's cost from the sizes it may see: every list and map a rule
    walks, and every string it compares, has a bound."""
    for path, node in walk(TENANCY):
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path
        if node.get("type") == "string" or node.get("x-kubernetes-int-or-string"):
            assert "maxLength" in node or "enum" in node, path


def test_exclusive_bounds_are_written_the_openapi_v3_0_way() -> None:
    flow = SPEC["router"]["properties"]["flowControl"]["properties"]
    for name in ("queueTTLSeconds", "starvationSeconds"):
        assert (flow[name]["minimum"], flow[name]["exclusiveMinimum"]) == (0, True)
    assert flow["maxInflightPerReplica"]["minimum"] == 0
    assert "exclusiveMinimum" not in flow["queueSize"] and flow["queueSize"]["minimum"] == 1
