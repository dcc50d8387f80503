"""spec.tenancy in the children: the ConfigMap holds the tenants file the router (or, without one,
the engines) reads, the pods mount it with the tenants' keys from their Secrets, get the flags,
and roll when any of it changes; spec.router.flowControl becomes the router's flags."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from llm_operator.builders import build_children, child_refs
from llm_operator.names import TENANTS_HASH_ANNOTATION

from pagedock.tenancy.tenants import parse_tenants
from tests.k8s_operator.test_builders import find, make_context
from tests.k8s_operator.validation import validate_kubernetes

TENANTS_FILE = "/etc/pagedock/tenants/tenants.yaml"
TENANCY: dict[str, Any] = {
    "priorityClasses": {"interactive": 0, "batch": 10},
    "defaultPriority": "batch",
    "tenants": [
        {
            "name": "chat",
            "apiKeySecrets": [{"name": "chat-keys"}, {"name": "chat-keys", "key": "previous"}],
            "priority": "interactive",
            "requestsPerMinute": 600,
            "tokensPerMinute": 200000,
            "maxConcurrency": 16,
        },
        {"name": "batch", "apiKeySecrets": [{"name": "batch-key", "key": "token"}]},
    ],
}


def children(**spec: Any) -> list[dict[str, Any]]:
    return build_children(make_context(spec))


def pod(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    template: dict[str, Any] = find(objects, "Deployment", f"chat-{component}")["spec"]["template"]
    return template


def container(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod(objects, component)["spec"]["containers"]
    return containers[0]


def tenants_hash(objects: list[dict[str, Any]], component: str = "router") -> str | None:
    annotations = pod(objects, component)["metadata"].get("annotations", {})
    return annotations.get(TENANTS_HASH_ANNOTATION)


def with_tenant_change(**fields: Any) -> dict[str, Any]:
    tenancy = copy.deepcopy(TENANCY)
    tenancy["tenants"][1].update(fields)
    return tenancy


@pytest.mark.parametrize("router", [True, False], ids=["router", "no-router"])
def test_every_child_with_tenancy_is_valid_kubernetes(router: bool) -> None:
    for child in children(tenancy=TENANCY, router={"enabled": router}):
        validate_kubernetes(child)


def test_the_config_map_holds_the_tenants_file_the_router_reads(tmp_path: Path) -> None:
    config_map = find(children(tenancy=TENANCY), "ConfigMap", "chat-tenants")
    content = yaml.safe_load(config_map["data"]["tenants.yaml"])
    assert content["priority_classes"] == {"interactive": 0, "batch": 10}
    assert content["default_priority"] == "batch"
    chat, batch = content["tenants"]
    assert chat["api_key_files"] == [
        "/etc/pagedock/tenants/keys/chat/0",
        "/etc/pagedock/tenants/keys/chat/1",
    ]
    assert batch == {"name": "batch", "api_key_files": ["/etc/pagedock/tenants/keys/batch/0"]}
    assert "api_keys" not in chat  # keys stay in their Secrets: files only
    # The router's own reader takes it, keys read from the files the pod would mount.
    for entry in content["tenants"]:
        for index, path in enumerate(entry["api_key_files"]):
            local = tmp_path / path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(f"sk-{entry['name']}-{index}\n")
            entry["api_key_files"][index] = str(local)
    table = parse_tenants(content)
    chat_tenant, batch_tenant = table.by_name("chat"), table.by_name("batch")
    assert chat_tenant is not None and batch_tenant is not None
    assert table.by_key("sk-chat-1") is chat_tenant and table.by_key("sk-batch-0") is batch_tenant
    assert (chat_tenant.priority, chat_tenant.tokens_per_minute) == (0, 200000)
    assert batch_tenant.priority == 10  # defaultPriority: batch


def test_the_router_mounts_the_file_and_each_key_at_its_stable_path() -> None:
    objects = children(tenancy=TENANCY)
    [volume] = [v for v in pod(objects, "router")["spec"]["volumes"] if v["name"] == "tenants"]
    config, chat_keys, batch_key = volume["projected"]["sources"]
    assert config["configMap"] == {
        "name": "chat-tenants",
        "items": [{"key": "tenants.yaml", "path": "tenants.yaml"}],
    }
    assert chat_keys["secret"] == {
        "name": "chat-keys",
        "items": [
            {"key": "api-key", "path": "keys/chat/0"},
            {"key": "previous", "path": "keys/chat/1"},
        ],
    }
    assert batch_key["secret"]["items"] == [{"key": "token", "path": "keys/batch/0"}]
    mount = {"name": "tenants", "mountPath": "/etc/pagedock/tenants", "readOnly": True}
    assert mount in container(objects, "router")["volumeMounts"]
    engine = pod(objects, "engine")["spec"]
    assert all(v["name"] != "tenants" for v in engine["volumes"])


def test_the_router_gets_the_tenant_flags_and_the_engines_its_order() -> None:
    objects = children(tenancy={**TENANCY, "fairness": "fcfs", "tenantHeader": "x-team"})
    args = container(objects, "router")["args"]
    assert args[args.index("--tenants") + 1] == TENANTS_FILE
    assert args[args.index("--fairness") + 1] == "fcfs"
    assert args[args.index("--tenant-header") + 1] == "x-team"
    engine_args = container(objects, "engine")["args"]
    assert "--tenants" not in engine_args and "--tenant-header" not in engine_args
    # ordered as the router orders: priority, then fair between the tenants the router names
    assert engine_args[engine_args.index("--scheduling-policy") + 1] == "priority"
    assert engine_args[engine_args.index("--fairness") + 1] == "fcfs"
    assert tenants_hash(objects, "engine") is None  # the router reads the tenants, not they


def test_without_a_router_the_engines_read_the_tenants() -> None:
    objects = children(tenancy=TENANCY, router={"enabled": False})
    args = container(objects, "engine")["args"]
    assert args[args.index("--tenants") + 1] == TENANTS_FILE
    assert args[args.index("--fairness") + 1] == "vtc"
    assert "--tenant-header" not in args
    volumes = {v["name"] for v in pod(objects, "engine")["spec"]["volumes"]}
    assert "tenants" in volumes
    assert any(m["name"] == "tenants" for m in container(objects, "engine")["volumeMounts"])
    assert tenants_hash(objects, "engine") is not None
    assert find(objects, "ConfigMap", "chat-tenants")


def test_without_tenancy_there_is_no_config_map_flag_volume_or_hash() -> None:
    objects = children()
    assert not [o for o in objects if o["metadata"]["name"] == "chat-tenants"]
    for component in ("router", "engine"):
        args = container(objects, component)["args"]
        assert not {"--tenants", "--fairness", "--scheduling-policy"} & set(args)
        assert all(v["name"] != "tenants" for v in pod(objects, component)["spec"]["volumes"])
        assert tenants_hash(objects, component) is None
    refs = child_refs(make_context({}))
    assert ("ConfigMap", "chat-tenants", False) in refs  # pruned when tenancy is removed


@pytest.mark.parametrize(
    "change",
    [
        {"tokensPerMinute": 1000},
        {"priority": "interactive"},
        {"apiKeySecrets": [{"name": "batch-key", "key": "rotated"}]},
        {"apiKeySecrets": [{"name": "batch-key-v2", "key": "token"}]},
    ],
    ids=["limit", "priority", "secret key", "secret name"],
)
def test_the_hash_changes_when_a_tenant_changes(change: dict[str, Any]) -> None:
    before = tenants_hash(children(tenancy=TENANCY))
    assert before is not None and before == tenants_hash(children(tenancy=TENANCY))
    assert tenants_hash(children(tenancy=with_tenant_change(**change))) != before


def test_the_hash_follows_the_tenants_file_not_other_settings() -> None:
    before = tenants_hash(children(tenancy=TENANCY))
    assert tenants_hash(children(tenancy=TENANCY, replicas=3)) == before
    renamed = {**TENANCY, "priorityClasses": {"interactive": 0, "batch": 20}}
    assert tenants_hash(children(tenancy=renamed)) != before


def test_flow_control_flags_are_passed_only_when_set() -> None:
    args = container(children(), "router")["args"]
    for flag in ("--max-inflight-per-replica", "--flow-queue-size", "--flow-queue-ttl-s"):
        assert flag not in args
    flow = {"maxInflightPerReplica": 4, "queueSize": 64, "queueTTLSeconds": 2.5}
    flow["starvationSeconds"] = 10
    args = container(children(router={"flowControl": flow}), "router")["args"]
    assert args[args.index("--max-inflight-per-replica") + 1] == "4"
    assert args[args.index("--flow-queue-size") + 1] == "64"
    assert args[args.index("--flow-queue-ttl-s") + 1] == "2.5"
    assert args[args.index("--flow-starvation-s") + 1] == "10"
    args = container(children(router={"flowControl": {"queueSize": 8}}), "router")["args"]
    assert "--flow-queue-size" in args and "--max-inflight-per-replica" not in args


QUOTA_REDIS = {"quotaStore": "redis", "quotaRedisURLSecret": {"name": "quota-redis"}}


@pytest.mark.parametrize("router", [True, False], ids=["router", "no-router"])
def test_a_shared_quota_store_reaches_the_pods_that_count_quotas_from_its_secret_only(
    router: bool,
) -> None:
    objects = children(tenancy={**TENANCY, **QUOTA_REDIS}, router={"enabled": router})
    counting, other = ("router", "engine") if router else ("engine", None)
    env = {e["name"]: e.get("valueFrom") for e in container(objects, counting).get("env", [])}
    assert env["PAGEDOCK_QUOTA_STORE"] == {"secretKeyRef": {"name": "quota-redis", "key": "url"}}
    assert "--quota-store" not in container(objects, counting)["args"]
    if other is not None:
        names = [e["name"] for e in container(objects, other).get("env", [])]
        assert "PAGEDOCK_QUOTA_STORE" not in names
    for child in objects:
        validate_kubernetes(child)


def test_by_default_each_counts_its_own_quotas() -> None:
    objects = children(tenancy=TENANCY)
    for component in ("router", "engine"):
        names = [e["name"] for e in container(objects, component).get("env", [])]
        assert "PAGEDOCK_QUOTA_STORE" not in names
