"""Model delivery in the builders: one download Job into a cache claim that engines (and routers,
when the claim is shared) mount read-only; an emptyDir per pod otherwise; the engine image."""

import dataclasses
from typing import Any

import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.builders.model_cache import build_model_download_job, download_job_name
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.validation import validate_kubernetes

HF_CLAIM = {
    "model": {"source": "hf://org/model", "revision": "v1", "cacheVolumeClaim": "hf-cache"},
    "resources": {"gpus": 1},
    "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
    "scheduling": {"nodeSelector": {"gpu": "h100"}},
}
CLAIM_MOUNT = {"name": "model-cache", "mountPath": "/cache/huggingface", "readOnly": True}
OFFLINE = {"name": "HF_HUB_OFFLINE", "value": "1"}


def make_context(spec: dict[str, Any], name: str = "chat", shared: bool = False) -> BuildContext:
    settings = OperatorSettings(image_repository="registry.test", image_tag="7")
    return BuildContext(name, "team-a", LLMDeploymentSpec.model_validate(spec), settings, shared)


def pod_of(ctx: BuildContext, name: str) -> dict[str, Any]:
    deployment = next(
        c for c in build_children(ctx) if (c["kind"], c["metadata"]["name"]) == ("Deployment", name)
    )
    return deployment["spec"]["template"]["spec"]


def test_without_a_claim_each_engine_downloads_into_an_emptydir_it_requests() -> None:
    pod = pod_of(
        make_context({"model": {"source": "hf://org/model", "cacheSize": "30Gi"}}), "chat-engine"
    )
    container = pod["containers"][0]
    assert {"name": "cache", "emptyDir": {"sizeLimit": "30Gi"}} in pod["volumes"]
    assert "persistentVolumeClaim" not in str(pod["volumes"])
    # 30Gi of cache + 1Gi of /tmp, in requests and limits
    assert container["resources"]["requests"]["ephemeral-storage"] == "31744Mi"
    assert container["resources"]["limits"]["ephemeral-storage"] == "31744Mi"
    assert OFFLINE not in container["env"]


def test_with_a_claim_engines_mount_it_read_only_and_stay_offline() -> None:
    pod = pod_of(make_context(HF_CLAIM), "chat-engine")
    container = pod["containers"][0]
    claim = {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True},
    }
    assert claim in pod["volumes"]
    assert CLAIM_MOUNT in container["volumeMounts"]
    assert OFFLINE in container["env"]
    assert {"name": "cache", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]  # kernels only
    assert container["resources"]["requests"]["ephemeral-storage"] == "3072Mi"


@pytest.mark.parametrize("shared", [False, True], ids=["read-write-once", "read-write-many"])
def test_router_mounts_the_claim_only_when_it_is_shared(shared: bool) -> None:
    container = pod_of(make_context(HF_CLAIM, shared=shared), "chat-router")["containers"][0]
    assert (CLAIM_MOUNT in container["volumeMounts"]) is shared
    assert (OFFLINE in container["env"]) is shared
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    } in container["env"]


def test_a_non_hub_source_downloads_nothing_and_asks_little_storage() -> None:
    spec = {"model": {"source": "smollm2-135m-instruct", "cacheVolumeClaim": "hf-cache"}}
    pod = pod_of(make_context(spec), "chat-engine")
    assert "model-cache" not in str(pod["volumes"])
    assert OFFLINE not in pod["containers"][0]["env"]
    assert pod["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "3072Mi"


def test_download_job_fills_the_claim_with_the_engine_image_and_hardening() -> None:
    job = build_model_download_job(make_context(HF_CLAIM))
    validate_kubernetes(job)
    assert job["spec"]["backoffLimit"] == 3
    assert job["spec"]["activeDeadlineSeconds"] == 1800
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.test/engine-cuda:7"
    assert container["args"] == ["download", "hf://org/model@v1"]
    assert {"name": "model-cache", "mountPath": "/cache/huggingface"} in container["volumeMounts"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}} in pod[
        "volumes"
    ]
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert HF_CLAIM["env"][0] in container["env"] and OFFLINE not in container["env"]


def test_download_job_name_changes_with_the_revision_and_fits_a_label() -> None:
    name = download_job_name(make_context(HF_CLAIM))
    assert name.startswith("chat-model-") and len(name) == len("chat-model-") + 8
    other = {**HF_CLAIM, "model": {**HF_CLAIM["model"], "revision": "v2"}}
    assert download_job_name(make_context(other)) != name
    assert download_job_name(make_context({**HF_CLAIM, "replicas": 5})) == name
    assert len(download_job_name(make_context(HF_CLAIM, name="x" * 56))) <= 63


@pytest.mark.parametrize(
    ("spec", "image"),
    [
        ({}, "registry.test/engine-cpu:7"),
        ({"resources": {"gpus": 1}}, "registry.test/engine-cuda:7"),
        ({"resources": {"gpus": 1}, "image": "mine/engine:1"}, "mine/engine:1"),
    ],
    ids=["cpu", "gpu", "spec-image"],
)
def test_engine_image_follows_the_gpus_unless_the_spec_names_one(spec: dict, image: str) -> None:
    ctx = make_context(spec)
    assert pod_of(ctx, "chat-engine")["containers"][0]["image"] == image
    assert pod_of(ctx, "chat-router")["containers"][0]["image"] == "registry.test/router:7"


def test_every_pod_changes_volume_ownership_only_on_a_root_mismatch() -> None:
    ctx = dataclasses.replace(make_context(HF_CLAIM), claim_shared=True)
    for name in ("chat-engine", "chat-router"):
        assert pod_of(ctx, name)["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
