"""Admission of LLMDeployments by the emulated API server (admission.py, over HTTP): every CEL rule
of the CRD refuses its violation with the API server's 422 and the rule's message, a valid object
is stored with the schema's defaults and without unknown fields, and a refused write stores
nothing. Transition rules (`oldSelf`), which the CRD has none of, on a CRD made for the test."""

import dataclasses
from typing import Any

import aiohttp
import kmock
import pytest
from llm_operator.api.spec import LLMDeploymentSpec

from tests.k8s_operator.admission import NOT_CHECKED, Admission
from tests.k8s_operator.emulator import ADMISSIONS, Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, live, make_llmd, send
from tests.k8s_operator.test_crd import OPENAPI, walk

INVALID = 'LLMDeployment.pagedock.dev "chat" is invalid: '
TENANT = {"name": "chat", "apiKeySecrets": [{"name": "chat-key"}]}


@dataclasses.dataclass(frozen=True)
class Case:
    rule: str
    spec: dict[str, Any]
    """A minimal spec that breaks this rule, and no other."""
    field: str
    message: str
    """The rule's message, or its messageExpression evaluated."""


CASES = {
    "gpus per rank": Case(
        "self.resources.gpus == 0 || self.resources.gpus == self.engine.tensorParallelSize",
        {"resources": {"gpus": 4}, "engine": {"tensorParallelSize": 2}},
        "spec",
        "resources.gpus must equal engine.tensorParallelSize (one GPU per rank)",
    ),
    "lora needs tp 1": Case(
        "self.engine.tensorParallelSize == 1 || !has(self.engine.maxLoras) && "
        "(!has(self.model.adapters) || size(self.model.adapters) == 0)",
        {"engine": {"maxLoras": 2, "tensorParallelSize": 2}},
        "spec",
        "LoRA (model.adapters, engine.maxLoras) needs engine.tensorParallelSize 1",
    ),
    "path prefix needs router": Case(
        "!self.ingress.enabled || self.ingress.path == '/' || self.router.enabled",
        {"ingress": {"enabled": True, "path": "/llm"}, "router": {"enabled": False}},
        "spec",
        "an ingress.path other than / needs the router (it serves the prefix)",
    ),
    "gateway needs router": Case(
        "!has(self.gateway) || self.router.enabled",
        {"gateway": {}, "router": {"enabled": False}},
        "spec",
        "gateway needs the router (it is the endpoint picker)",
    ),
    "builtin needs router": Case(
        "!self.autoscaling.enabled || self.autoscaling.mode != 'builtin' || self.router.enabled",
        {"autoscaling": {"enabled": True}, "router": {"enabled": False}},
        "spec",
        "autoscaling.mode builtin needs the router (it reads the routers' demand)",
    ),
    "zero needs router": Case(
        "!self.autoscaling.enabled || self.autoscaling.minReplicas >= 1 || self.router.enabled",
        {
            "autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 0},
            "router": {"enabled": False},
        },
        "spec",
        "autoscaling.minReplicas 0 needs the router (it holds requests while an engine starts)",
    ),
    "revision of hf only": Case(
        "!has(self.revision) || self.source.startsWith('hf://')",
        {"model": {"adapters": [{"name": "a", "source": "pvc://c/a", "revision": "v1"}]}},
        "spec.model.adapters[0]",
        "revision is for hf:// sources only",
    ),
    "budget below seqs": Case(
        "self.maxNumBatchedTokens >= self.maxNumSeqs",
        {"engine": {"maxNumSeqs": 512, "maxNumBatchedTokens": 256}},
        "spec.engine",
        "maxNumBatchedTokens must be >= maxNumSeqs",
    ),
    "budget below model length": Case(
        "self.enableChunkedPrefill || !has(self.maxModelLen) || "
        "self.maxNumBatchedTokens >= self.maxModelLen",
        {"engine": {"enableChunkedPrefill": False, "maxModelLen": 4096}},
        "spec.engine",
        "without chunked prefill, maxNumBatchedTokens must be >= maxModelLen",
    ),
    "kv event ports differ": Case(
        "self.port != self.replayPort",
        {"engine": {"kvEvents": {"port": 6000, "replayPort": 6000}}},
        "spec.engine.kvEvents",
        "kvEvents.port and kvEvents.replayPort must differ",
    ),
    "kv event ports not 8000": Case(
        "self.port != 8000 && self.replayPort != 8000",
        {"engine": {"kvEvents": {"port": 8000}}},
        "spec.engine.kvEvents",
        "kvEvents ports must not be 8000 (the engine's HTTP port)",
    ),
    "tls needs host": Case(
        "!has(self.tlsSecretName) || has(self.host)",
        {"ingress": {"enabled": True, "tlsSecretName": "tls"}},
        "spec.ingress",
        "tlsSecretName needs host",
    ),
    "replica range": Case(
        "self.maxReplicas >= self.minReplicas",
        {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
        "spec.autoscaling",
        "maxReplicas must be >= minReplicas",
    ),
    "hpa to zero": Case(
        "self.mode != 'hpa' || self.minReplicas >= 1",
        {"autoscaling": {"mode": "hpa", "minReplicas": 0}},
        "spec.autoscaling",
        "minReplicas 0 needs mode builtin or keda (an HPA cannot scale to zero)",
    ),
    "unknown priority class": Case(
        "self.tenants.all(t, !has(t.priority) || type(t.priority) != string || "
        "has(self.priorityClasses) && t.priority in self.priorityClasses)",
        {
            "tenancy": {
                "tenants": [TENANT, {**TENANT, "name": "batch", "priority": "gold"}],
                "priorityClasses": {"interactive": 0},
            }
        },
        "spec.tenancy",
        "tenant batch: priority gold is not in priorityClasses",
    ),
    "unknown default class": Case(
        "!has(self.defaultPriority) || type(self.defaultPriority) != string || "
        "has(self.priorityClasses) && self.defaultPriority in self.priorityClasses",
        {"tenancy": {"tenants": [TENANT], "defaultPriority": "batch"}},
        "spec.tenancy",
        "defaultPriority batch is not in priorityClasses",
    ),
    "reserved tenant name": Case(
        "self.tenants.all(t, t.name != 'default')",
        {"tenancy": {"tenants": [{**TENANT, "name": "default"}]}},
        "spec.tenancy",
        "the tenant name default is reserved (the router's own --api-key holders): "
        "name the tenant otherwise",
    ),
    "a tenant without keys": Case(
        "has(self.tenantHeader) || self.tenants.all(t, has(t.apiKeySecrets) && "
        "size(t.apiKeySecrets) > 0)",
        {"tenancy": {"tenants": [{"name": "chat"}]}},
        "spec.tenancy",
        "every tenant needs apiKeySecrets unless tenantHeader names the tenants",
    ),
    "a redis quota store without its secret": Case(
        "self.quotaStore != 'redis' || has(self.quotaRedisURLSecret)",
        {"tenancy": {"tenants": [TENANT], "quotaStore": "redis"}},
        "spec.tenancy",
        "tenancy.quotaStore redis needs tenancy.quotaRedisURLSecret (the Secret holding the URL)",
    ),
    "a redis quota secret for the memory store": Case(
        "self.quotaStore == 'redis' || !has(self.quotaRedisURLSecret)",
        {"tenancy": {"tenants": [TENANT], "quotaRedisURLSecret": {"name": "quota-redis"}}},
        "spec.tenancy",
        "tenancy.quotaRedisURLSecret is for tenancy.quotaStore redis",
    ),
    "a redis store without its secret": Case(
        "self.store != 'redis' || has(self.redisURLSecret)",
        {"responses": {"store": "redis"}},
        "spec.responses",
        "responses.store redis needs responses.redisURLSecret (the Secret holding the URL)",
    ),
    "a redis secret for the memory store": Case(
        "self.store == 'redis' || !has(self.redisURLSecret)",
        {"responses": {"redisURLSecret": {"name": "responses-redis"}}},
        "spec.responses",
        "responses.redisURLSecret is for responses.store redis",
    ),
}


async def refused(api: aiohttp.ClientSession, method: str, path: str, body: Any) -> dict[str, Any]:
    """The API server's answer to a write it must refuse as invalid (422, a Status)."""
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with api.request(method, path, json=body, headers=headers) as response:
        assert response.status == 422, await response.text()
        status: dict[str, Any] = await response.json()
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 422, "Invalid")
    return status


def test_every_cel_rule_of_the_crd_has_a_case_and_compiles() -> None:
    in_schema = [
        rule["rule"]
        for _, node in walk(OPENAPI)
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert sorted(in_schema) == sorted(case.rule for case in CASES.values()), (
        "a CEL rule was added or changed: give it a case in CASES"
    )
    admission = ADMISSIONS[LLMD]
    assert sorted(rule.rule for rule in admission.rules) == sorted(in_schema)


@pytest.mark.asyncio
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_each_cel_rule_refuses_its_violation_with_its_message(
    cluster: Emulator, api: aiohttp.ClientSession, case: Case
) -> None:
    status = await refused(api, "POST", LLMD_COLLECTION, make_llmd(**case.spec))
    body = f'Invalid value: "object": {case.message}'
    assert status["message"] == f"{INVALID}{case.field}: {body}"
    cause = {"reason": "FieldValueInvalid", "message": body, "field": case.field}
    assert status["details"] == {
        "name": "chat",
        "group": "pagedock.dev",
        "kind": "LLMDeployment",
        "causes": [cause],
    }
    assert live(cluster, LLMD, "chat") is None


@pytest.mark.asyncio
async def test_a_valid_object_is_stored_defaulted_and_pruned(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    spec: dict[str, Any] = {
        "engine": {"maxNumSeqs": 128},
        "tenancy": {"tenants": [TENANT]},
        "scheduling": {"affinity": {"nodeAffinity": {"any": "thing"}}},  # preserved as is
    }
    typo = {"engine": {"maxNumSeqs": 128, "maxNumSequences": 4}}  # pruned, not refused
    sent = {**make_llmd(**{**spec, **typo}), "extra": True}
    sent["metadata"]["labels"] = {"team": "a"}
    answered = await send(api, "POST", LLMD_COLLECTION, sent)
    assert answered == live(cluster, LLMD, "chat")
    assert "extra" not in answered and answered["metadata"]["labels"] == {"team": "a"}
    stored = answered["spec"]
    assert stored["engine"]["maxNumSeqs"] == 128 and "maxNumSequences" not in stored["engine"]
    assert (stored["engine"]["blockSize"], stored["engine"]["kvEvents"]["port"]) == (16, 5557)
    assert stored["router"]["enabled"] is True and stored["autoscaling"]["mode"] == "builtin"
    assert stored["tenancy"]["fairness"] == "vtc"
    assert stored["tenancy"]["tenants"][0]["apiKeySecrets"] == [
        {"name": "chat-key", "key": "api-key"}  # a default inside a list item
    ]
    assert stored["scheduling"]["affinity"] == {"nodeAffinity": {"any": "thing"}}
    assert "gateway" not in stored and "apiKeySecret" not in stored  # no default: stay absent
    # The server's defaults are the models' own: the operator reads the same spec either way.
    parsed = LLMDeploymentSpec.model_validate(make_llmd(**spec)["spec"])
    assert LLMDeploymentSpec.model_validate(stored) == parsed


@pytest.mark.asyncio
async def test_an_object_without_spec_gets_the_whole_default_spec(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    answered = await send(api, "POST", LLMD_COLLECTION, {**make_llmd(), "spec": None})
    assert answered["spec"]["model"]["source"] == "smollm2-135m-instruct"
    assert answered["spec"]["replicas"] == 1


@pytest.mark.asyncio
async def test_an_update_that_breaks_a_rule_is_refused_and_stores_nothing(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    before = live(cluster, LLMD, "chat")
    writes = len(cluster.objects[LLMD, "team-a", "chat"].history)
    path = f"{LLMD_COLLECTION}/chat"
    status = await refused(api, "PATCH", path, {"spec": {"engine": {"maxNumSeqs": 4096}}})
    assert status["message"] == (
        f'{INVALID}spec.engine: Invalid value: "object": maxNumBatchedTokens must be >= maxNumSeqs'
    )
    assert live(cluster, LLMD, "chat") == before
    assert len(cluster.objects[LLMD, "team-a", "chat"].history) == writes


@pytest.mark.asyncio
async def test_a_patch_is_admitted_on_its_merged_result(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    created = await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=3))
    path = f"{LLMD_COLLECTION}/chat"
    patch = {"spec": {"replicas": None, "engine": {"maxNumSeqs": 64, "typo": 1}}}
    patched = await send(api, "PATCH", path, patch)
    assert patched == live(cluster, LLMD, "chat")
    assert patched["spec"]["replicas"] == 1  # removed, so defaulted again
    assert patched["spec"]["engine"]["maxNumSeqs"] == 64 and "typo" not in patched["spec"]["engine"]
    assert patched["metadata"]["generation"] == created["metadata"]["generation"] + 1


@pytest.mark.asyncio
async def test_a_schema_error_is_reported_and_blocks_the_cel_rules(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    engine = {"dtype": "int3", "maxNumSeqs": 512, "maxNumBatchedTokens": 256}
    status = await refused(api, "POST", LLMD_COLLECTION, make_llmd(engine=engine))
    supported = '"auto", "float32", "float16", "bfloat16"'
    assert status["message"] == (
        f'{INVALID}[spec.engine.dtype: Unsupported value: "int3": supported values: {supported}, '
        f'<nil>: Invalid value: "null": {NOT_CHECKED}]'
    )
    assert [cause["reason"] for cause in status["details"]["causes"]] == [
        "FieldValueNotSupported",
        "FieldValueInvalid",
    ]


@pytest.mark.asyncio
async def test_a_bound_and_a_list_map_key_twice_are_refused(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    tenancy = {"tenants": [TENANT, {**TENANT, "apiKeySecrets": [{"name": "other"}]}]}
    status = await refused(api, "POST", LLMD_COLLECTION, make_llmd(replicas=-1, tenancy=tenancy))
    assert status["message"] == (
        f"{INVALID}[spec.replicas: Invalid value: -1: spec.replicas in body should be greater "
        "than or equal to 0, spec.tenancy.tenants[1]: Duplicate value: "
        'map[string]interface {}{"name":"chat"}]'
    )


@pytest.mark.asyncio
async def test_a_status_write_is_pruned_and_not_held_to_the_spec_rules(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    stored = cluster.objects[LLMD, "team-a", "chat"]
    # NOTE: stored as no write could store it: a spec that breaks a rule (maxReplicas >= min).
    stored["spec"] = {**stored.raw["spec"], "autoscaling": {"minReplicas": 5, "maxReplicas": 2}}
    ready = {"type": "Ready", "status": "True", "reason": "AllReady"}
    ready["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    status = {"readyReplicas": 1, "unknown": "x", "conditions": [ready]}
    patched = await send(api, "PATCH", f"{LLMD_COLLECTION}/chat/status", {"status": status})
    assert patched["status"]["readyReplicas"] == 1 and "unknown" not in patched["status"]
    assert patched["status"]["conditions"][0]["message"] == ""  # the schema's default


WIDGETS = "example.dev/v1/widgets"
WIDGET_COLLECTION = "/apis/example.dev/v1/namespaces/team-a/widgets"
GROWS = {
    "rule": "self.size >= oldSelf.size",
    "messageExpression": "'size may not shrink from ' + string(oldSelf.size)",
}
KEEPS_COLOUR = {"rule": "self.colour == oldSelf.colour", "message": "a part keeps its colour"}


def widget_crd() -> dict[str, Any]:
    """A CRD with transition rules: on spec, and on the items of a list-map (by name)."""
    part = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "colour": {"type": "string"}},
        "x-kubernetes-validations": [KEEPS_COLOUR],
    }
    spec = {
        "type": "object",
        "x-kubernetes-validations": [GROWS],
        "properties": {
            "size": {"type": "integer", "default": 1},
            "parts": {
                "type": "array",
                "items": part,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
        },
    }
    schema = {"type": "object", "properties": {"spec": spec}}
    version = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    names = {"kind": "Widget", "plural": "widgets"}
    return {"spec": {"group": "example.dev", "names": names, "versions": [version]}}


@pytest.fixture()
def widgets(cluster: Emulator) -> Emulator:
    cluster.resources[WIDGETS] = kmock.ResourceInfo(
        kind="Widget", namespaced=True, verbs={"get", "create", "patch"}
    )
    cluster.admissions[WIDGETS] = Admission(widget_crd())
    return cluster


def widget(**spec: Any) -> dict[str, Any]:
    metadata = {"name": "w", "namespace": "team-a"}
    return {"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": metadata, "spec": spec}


@pytest.mark.asyncio
async def test_a_transition_rule_holds_on_update_only(
    widgets: Emulator, api: aiohttp.ClientSession
) -> None:
    parts = [{"name": "a", "colour": "red"}]
    await send(api, "POST", WIDGET_COLLECTION, widget(size=5, parts=parts))  # no oldSelf yet
    path = f"{WIDGET_COLLECTION}/w"
    status = await refused(api, "PATCH", path, {"spec": {"size": 3}})
    invalid = 'Widget.example.dev "w" is invalid: '
    assert (
        status["message"] == f'{invalid}spec: Invalid value: "object": size may not shrink from 5'
    )
    grown = await send(api, "PATCH", path, {"spec": {"size": 7}})
    assert grown["spec"]["size"] == 7


@pytest.mark.asyncio
async def test_a_transition_rule_on_a_list_map_item_sees_the_item_with_its_key(
    widgets: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", WIDGET_COLLECTION, widget(parts=[{"name": "a", "colour": "red"}]))
    path = f"{WIDGET_COLLECTION}/w"
    repainted = [{"name": "b", "colour": "blue"}, {"name": "a", "colour": "blue"}]
    status = await refused(api, "PATCH", path, {"spec": {"parts": repainted}})
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": a part keeps its colour',
            "field": "spec.parts[1]",
        }
    ]
    added = [{"name": "b", "colour": "blue"}, {"name": "a", "colour": "red"}]
    assert (await send(api, "PATCH", path, {"spec": {"parts": added}}))["spec"]["parts"] == added
