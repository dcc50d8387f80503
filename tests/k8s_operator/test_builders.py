"""The pure builders: their output is valid Kubernetes and carries what the spec asks for."""

from typing import Any

import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.builders.children import drop_empty
from llm_operator.builders.engine_args import engine_args
from llm_operator.builders.model_source import resolve_model_source
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.validation import validate_kubernetes

SPECS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "gpu-everything": {
        "model": {"source": "hf://org/model", "revision": "main", "cacheVolumeClaim": "hf-cache"},
        "resources": {"gpus": 1, "requests": {"cpu": "8", "memory": "64Gi"}},
        "engine": {"dtype": "bfloat16", "maxModelLen": 8192},
        "env": [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "LOG_LEVEL", "value": "debug"},
        ],
        "ingress": {
            "enabled": True,
            "host": "llm.example.com",
            "tlsSecretName": "tls",
            "className": "nginx",
        },
        "autoscaling": {"enabled": True, "targetCPUUtilizationPercentage": 80},
        "apiKeySecret": {"name": "key"},
        "internalKeySecret": {"name": "fleet", "key": "internal-key"},
        "scheduling": {
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
    },
    "pvc-no-router": {"model": {"source": "pvc://weights/llama/8b"}, "router": {"enabled": False}},
    "gpu-tensor-parallel": {
        "resources": {"gpus": 2, "shmSize": "4Gi"},
        "engine": {"tensorParallelSize": 2},
    },
    "gateway": {
        "gateway": {
            "failureMode": "FailOpen",
            "shedTtftMs": 500,
            "httpRoute": {
                "parentRefs": [{"name": "inference-gw", "namespace": "gw", "sectionName": "http"}],
                "hostnames": ["llm.example.com"],
                "path": "/llm",
                "requestTimeout": "600s",
            },
            "dataPlanePeers": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gw"}}}
            ],
        }
    },
}


def make_context(spec: dict[str, Any], name: str = "chat") -> BuildContext:
    return BuildContext(name, "team-a", LLMDeploymentSpec.model_validate(spec), OperatorSettings())


def find(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(c for c in children if c["kind"] == kind and c["metadata"]["name"] == name)


@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_every_child_is_valid_kubernetes(spec_name: str) -> None:
    for child in build_children(make_context(SPECS[spec_name])):
        validate_kubernetes(child)


def test_defaults_give_a_working_cpu_deployment_with_router() -> None:
    kinds = sorted(c["kind"] for c in build_children(make_context({})))
    assert kinds == sorted(
        [
            "ConfigMap",
            "Service",
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
        ]
    )


def test_engines_and_routers_read_the_internal_key_from_its_secret() -> None:
    children = build_children(make_context(SPECS["gpu-everything"]))
    ref = {"secretKeyRef": {"name": "fleet", "key": "internal-key"}}
    for name in ("chat-engine", "chat-router"):
        [container] = find(children, "Deployment", name)["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("valueFrom") for e in container["env"]}
        assert env["PAGEDOCK_INTERNAL_API_KEY"] == ref, name


def test_without_an_internal_key_secret_no_container_gets_the_variable() -> None:
    for child in build_children(make_context({})):
        if child["kind"] == "Deployment":
            [container] = child["spec"]["template"]["spec"]["containers"]
            assert all(e["name"] != "PAGEDOCK_INTERNAL_API_KEY" for e in container.get("env", []))


def test_gpu_engine_requests_gpus_and_tolerates_gpu_nodes() -> None:
    children = build_children(make_context(SPECS["gpu-everything"]))
    pod = find(children, "Deployment", "chat-engine")["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_a_tensor_parallel_engine_gets_a_gpu_and_shm_per_rank_and_its_rendezvous_env() -> None:
    children = build_children(make_context(SPECS["gpu-tensor-parallel"]))
    pod = find(children, "Deployment", "chat-engine")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = container["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PAGEDOCK_TENSOR_PARALLEL_PORT"] == "29500"
    assert env["NCCL_SOCKET_IFNAME"] == "lo"


def test_one_rank_keeps_its_shm_size_as_written_and_no_rendezvous_env() -> None:
    spec = {"resources": {"shmSize": "1536Mi"}}
    pod = find(build_children(make_context(spec)), "Deployment", "chat-engine")["spec"]["template"][
        "spec"
    ]
    assert (
        next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "1536Mi"
    )
    assert not any(
        e["name"].startswith(("PAGEDOCK_TENSOR", "NCCL")) for e in pod["containers"][0]["env"]
    )


def test_engine_args_mirror_the_engine_settings() -> None:
    spec = {
        "engine": {
            "enablePrefixCaching": False,
            "enableChunkedPrefill": False,
            "maxNumSeqs": 8,
            "maxNumBatchedTokens": 4096,
            "blockSize": 32,
        },
        "model": {"name": "chat-model"},
    }
    args = engine_args(make_context(spec))
    assert args[:7] == [
        "serve",
        "--model",
        "smollm2-135m-instruct",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    for flag, value in [
        ("--max-num-seqs", "8"),
        ("--max-num-batched-tokens", "4096"),
        ("--block-size", "32"),
        ("--served-model-name", "chat-model"),
    ]:
        assert args[args.index(flag) + 1] == value
    assert "--no-prefix-caching" in args and "--no-chunked-prefill" in args


@pytest.mark.parametrize(
    ("field", "value", "flag", "passed"),
    [
        ("maxStepMs", 120, "--max-step-ms", "120.0"),
        ("longPrefillTokenThreshold", 256, "--long-prefill-token-threshold", "256"),
    ],
)
def test_step_shaping_is_passed_only_when_set(
    field: str, value: int, flag: str, passed: str
) -> None:
    assert flag not in engine_args(make_context({}))
    args = engine_args(make_context({"engine": {field: value}}))
    assert args[args.index(flag) + 1] == passed


def test_a_speculative_config_is_passed_as_written_and_a_bad_one_is_refused() -> None:
    assert "--speculative-config" not in engine_args(make_context({}))
    ngram = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}'
    args = engine_args(make_context({"engine": {"speculativeConfig": ngram}}))
    assert args[args.index("--speculative-config") + 1] == ngram
    eagle = '{"method": "eagle", "num_speculative_tokens": 2}'
    with pytest.raises(ValueError, match=r"(?s)speculativeConfig.*method 'eagle' is not served"):
        make_context({"engine": {"speculativeConfig": eagle}})


def test_the_cpu_gemm_and_kv_cache_dtypes_are_passed_only_when_not_auto() -> None:
    args = engine_args(make_context({}))
    assert "--cpu-gemm-dtype" not in args and "--kv-cache-dtype" not in args
    engine = {"cpuGemmDtype": "float32", "kvCacheDtype": "bfloat16"}
    args = engine_args(make_context({"engine": engine}))
    assert args[args.index("--cpu-gemm-dtype") + 1] == "float32"
    assert args[args.index("--kv-cache-dtype") + 1] == "bfloat16"


def test_quantization_is_passed_only_when_set() -> None:
    assert "--quantization" not in engine_args(make_context({}))
    args = engine_args(make_context({"engine": {"quantization": "w8a8"}}))
    assert args[args.index("--quantization") + 1] == "w8a8"


def test_the_router_s_byte_budgets_are_passed_only_when_set() -> None:
    def router_args(spec: dict[str, Any]) -> list[str]:
        router = find(build_children(make_context(spec)), "Deployment", "chat-router")
        args: list[str] = router["spec"]["template"]["spec"]["containers"][0]["args"]
        return args

    assert "--hold-queue-bytes" not in router_args({})
    assert "--max-buffered-body-bytes" not in router_args({})
    budgets = {"holdQueueBytes": 64 * 2**20, "maxBufferedBodyBytes": 512 * 2**20}
    args = router_args({"router": budgets})
    assert args[args.index("--hold-queue-bytes") + 1] == str(64 * 2**20)
    assert args[args.index("--max-buffered-body-bytes") + 1] == str(512 * 2**20)
    with pytest.raises(ValueError, match="maxBufferedBodyBytes"):
        make_context({"router": {"maxBufferedBodyBytes": 2**20}})


def test_router_runs_k8s_discovery_against_the_engine_service() -> None:
    router = find(build_children(make_context({})), "Deployment", "chat-router")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [
        "route",
        "--discovery",
        "k8s",
        "--service",
        "chat-engine",
        "--namespace",
        "team-a",
        "--model",
        "smollm2-135m-instruct",
        "--policy",
        "prefix-aware",
        "--block-size",
        "16",
        "--hold-queue-size",
        "256",
        "--hold-timeout-s",
        "300",
        "--warm-prefixes",
        "8",
        "--warm-timeout-s",
        "30",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
    ]


def test_pvc_source_mounts_the_claim_read_only() -> None:
    children = build_children(make_context(SPECS["pvc-no-router"]))
    container = find(children, "Deployment", "chat-engine")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["args"][2] == "/models/weights/llama/8b"
    assert {"name": "model", "mountPath": "/models/weights", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert not [c for c in children if c["metadata"]["name"] == "chat-router"]


@pytest.mark.parametrize("shared", [True, False])
def test_the_router_mounts_a_pvc_models_claim_only_when_it_is_shared(shared: bool) -> None:
    spec = LLMDeploymentSpec.model_validate({"model": {"source": "pvc://weights/llama/8b"}})
    ctx = BuildContext("chat", "team-a", spec, OperatorSettings(), model_claim_shared=shared)
    pod = find(build_children(ctx), "Deployment", "chat-router")["spec"]["template"]["spec"]
    mounts = [m["name"] for m in pod["containers"][0]["volumeMounts"]]
    assert ("model" in mounts) is shared  # a ReadWriteOnce claim would pin routers to its node
    assert ("model" in [v["name"] for v in pod["volumes"]]) is shared
    args = pod["containers"][0]["args"]
    # Without the files the router balances by load (no tokenizer), rather than not starting.
    assert ("--model" in args) is shared


@pytest.mark.parametrize(
    ("source", "model_arg", "served_name"),
    [
        ("smollm2-135m-instruct", "smollm2-135m-instruct", "smollm2-135m-instruct"),
        (
            "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
            "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct",
        ),
        ("hf://org/model@v2", "hf://org/model@v2", "model"),
        ("pvc://models/qwen", "/models/models/qwen", "qwen"),
        ("file:///opt/models/tiny", "/opt/models/tiny", "tiny"),
    ],
)
def test_model_sources_resolve(source: str, model_arg: str, served_name: str) -> None:
    resolved = resolve_model_source(source)
    assert (resolved.model_arg, resolved.default_served_name) == (model_arg, served_name)


def test_hf_revision_reaches_engine_and_router_in_the_model_argument() -> None:
    children = build_children(make_context(SPECS["gpu-everything"]))
    for name in ("chat-engine", "chat-router"):
        container = find(children, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        assert container["args"][container["args"].index("--model") + 1] == "hf://org/model@main"
    assert find(children, "ConfigMap", "chat-engine")["data"]["HF_REVISION"] == "main"


def test_router_gets_the_hub_variables_of_spec_env_only() -> None:
    children = build_children(make_context(SPECS["gpu-everything"]))
    router = find(children, "Deployment", "chat-router")["spec"]["template"]["spec"]
    names = [var["name"] for var in router["containers"][0]["env"]]
    assert "HF_TOKEN" in names and "LOG_LEVEL" not in names


def test_config_change_rolls_the_engine_pods() -> None:
    def config_hash(spec: dict[str, Any]) -> str:
        deployment = find(build_children(make_context(spec)), "Deployment", "chat-engine")
        return deployment["spec"]["template"]["metadata"]["annotations"]["pagedock.dev/config-hash"]

    assert config_hash({}) != config_hash({"model": {"name": "other"}})


def test_drop_empty_keeps_selector_like_empty_objects() -> None:
    obj = {"a": {}, "b": [], "c": None, "namespaceSelector": {}, "d": {"emptyDir": {}, "e": []}}
    assert drop_empty(obj) == {"namespaceSelector": {}, "d": {"emptyDir": {}}}


def test_an_ingress_path_is_served_by_the_router_and_advertised() -> None:
    ctx = make_context({"ingress": {"enabled": True, "host": "llm.example.com", "path": "/llm/"}})
    children = build_children(ctx)
    args = find(children, "Deployment", "chat-router")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert args[args.index("--root-path") + 1] == "/llm"
    assert (
        find(children, "Ingress", "chat")["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/llm/"
    )
    assert ctx.endpoint() == "http://llm.example.com/llm"
    root = find(
        build_children(make_context({"ingress": {"enabled": True}})), "Deployment", "chat-router"
    )
    assert "--root-path" not in root["spec"]["template"]["spec"]["containers"][0]["args"]


def test_two_router_replicas_get_a_pdb_and_spread_over_nodes() -> None:
    children = build_children(make_context({"router": {"replicas": 2}}))
    pdb = find(children, "PodDisruptionBudget", "chat-router")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    pod = find(children, "Deployment", "chat-router")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"] == pdb["spec"]["selector"]
    for child in children:
        validate_kubernetes(child)


def test_one_router_replica_gets_neither_and_a_scale_down_prunes_the_pdb() -> None:
    from llm_operator.builders import child_refs

    ctx = make_context({"router": {"replicas": 1}})
    children = build_children(ctx)
    assert not [
        c
        for c in children
        if c["metadata"]["name"] == "chat-router" and c["kind"] == "PodDisruptionBudget"
    ]
    assert "affinity" not in find(children, "Deployment", "chat-router")["spec"]["template"]["spec"]
    assert ("PodDisruptionBudget", "chat-router", False) in child_refs(ctx)


def test_engine_network_policy_admits_scrapers_from_the_named_namespaces_only() -> None:
    settings = OperatorSettings(scraper_namespaces=("monitoring", "pagedock-system"))
    ctx = BuildContext("chat", "team-a", LLMDeploymentSpec(), settings)
    policy = find(build_children(ctx), "NetworkPolicy", "chat-engine")
    (rule,) = policy["spec"]["ingress"]
    router, scrapers = rule["from"]
    assert router == {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "pagedock",
                "app.kubernetes.io/instance": "chat",
                "app.kubernetes.io/component": "router",
            }
        }
    }
    assert scrapers == {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": ["monitoring", "pagedock-system"],
                }
            ]
        }
    }
    validate_kubernetes(policy)
    none = BuildContext(
        "chat", "team-a", LLMDeploymentSpec(), OperatorSettings(scraper_namespaces=())
    )
    assert (
        len(
            find(build_children(none), "NetworkPolicy", "chat-engine")["spec"]["ingress"][0]["from"]
        )
        == 1
    )


def test_scraper_namespaces_come_from_the_environment() -> None:
    env = {"PAGEDOCK_OPERATOR_SCRAPER_NAMESPACES": "pagedock-system,monitoring"}
    assert OperatorSettings.from_env(env).scraper_namespaces == ("pagedock-system", "monitoring")
    assert OperatorSettings().scraper_namespaces == ("monitoring",)
