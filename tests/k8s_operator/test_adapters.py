"""LoRA adapters in the spec and the pure builders: the engine flags, where each adapter's files
come from, the Jobs that put them into the cache claim, and the plan and status computed from
what the engine replicas list."""

from typing import Any

import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.builders.adapter_job import build_adapter_job
from llm_operator.builders.adapter_source import adapter_problem, adapter_sources
from llm_operator.builders.children import drop_empty
from llm_operator.builders.engine_args import engine_args
from llm_operator.controller.adapter_delivery import job_delivery
from llm_operator.fleet.adapter_status import (
    Delivery,
    EngineView,
    adapter_status,
    adapter_warnings,
    adapters_ready,
    plan_actions,
)
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.validation import validate_kubernetes

HF_MODEL = {"source": "hf://org/base", "cacheVolumeClaim": "hf-cache"}
SQL = {"name": "sql", "source": "file:///adapters/sql"}
CHAT = {"name": "chat", "source": "file:///adapters/chat"}
POEMS = {"name": "poems", "source": "file:///adapters/poems"}


def make_ctx(model: dict[str, Any] | None = None, **spec: Any) -> BuildContext:
    parsed = LLMDeploymentSpec.model_validate({"model": model or {}, **spec})
    return BuildContext("chat", "team-a", parsed, OperatorSettings())


def engine_children(ctx: BuildContext) -> list[dict[str, Any]]:
    """The children whose change would roll the engine pods (Deployment and its ConfigMap)."""
    wanted = {"Deployment", "ConfigMap"}
    return [
        c for c in build_children(ctx) if c["kind"] in wanted and "engine" in c["metadata"]["name"]
    ]


def test_declared_adapters_turn_lora_on_with_the_run_time_endpoints() -> None:
    args = engine_args(make_ctx({"adapters": [SQL]}))
    assert args[args.index("--enable-lora") :][:2] == [
        "--enable-lora",
        "--allow-runtime-lora-updating",
    ]
    assert "--lora-modules" not in args  # adapters are loaded at run time, never flags
    assert "--max-loras" not in args and "--max-lora-rank" not in args  # the engine's defaults


def test_max_loras_turns_lora_on_without_adapters_and_the_settings_become_flags() -> None:
    args = engine_args(make_ctx(engine={"maxLoras": 8, "maxLoraRank": 16}))
    assert {"--enable-lora", "--allow-runtime-lora-updating"} <= set(args)
    assert args[args.index("--max-loras") + 1] == "8"
    assert args[args.index("--max-lora-rank") + 1] == "16"


def test_without_adapters_or_max_loras_lora_stays_off() -> None:
    assert "--enable-lora" not in engine_args(make_ctx())


def test_adding_or_removing_an_adapter_leaves_the_engine_pods_template_as_it_is() -> None:
    two = engine_children(make_ctx({"adapters": [SQL, CHAT]}))
    three = engine_children(make_ctx({"adapters": [SQL, CHAT, POEMS]}))
    one = engine_children(make_ctx({"adapters": [CHAT]}))
    assert two == three == one


@pytest.mark.parametrize(
    ("model", "adapter", "expected"),
    [
        (
            {},
            {"name": "a", "source": "hf://org/sql-lora"},
            ("hf://org/sql-lora", "none"),  # the default branch, never HF_REVISION
        ),
        (
            {},
            {"name": "a", "source": "hf://org/sql-lora", "revision": "v2"},
            ("hf://org/sql-lora@v2", "none"),
        ),
        (
            {},
            {"name": "a", "source": "hf://org/sql-lora@v3", "revision": "v2"},
            ("hf://org/sql-lora@v3", "none"),
        ),
        (
            HF_MODEL,
            {"name": "a", "source": "hf://org/sql-lora"},
            ("hf://org/sql-lora", "download"),
        ),
        (
            {"source": "pvc://models/base"},
            {"name": "a", "source": "pvc://models/adapters/sql/"},
            ("/models/models/adapters/sql", "none"),
        ),
        ({}, {"name": "a", "source": "file:///opt/adapters/sql"}, ("/opt/adapters/sql", "none")),
    ],
)
def test_each_source_is_loaded_from_what_the_engine_pods_already_have(
    model: dict[str, Any], adapter: dict[str, Any], expected: tuple[str, str]
) -> None:
    [source] = adapter_sources(make_ctx({**model, "adapters": [adapter]}))
    assert (source.lora_path, source.delivery) == expected


def test_a_pvc_adapter_on_another_claim_is_copied_into_the_cache_claim() -> None:
    ctx = make_ctx({**HF_MODEL, "adapters": [{"name": "sql", "source": "pvc://adapters/team/sql"}]})
    [source] = adapter_sources(ctx)
    assert source.delivery == "copy" and (source.claim, source.sub_path) == ("adapters", "team/sql")
    assert source.lora_path == f"/cache/huggingface/pagedock-adapters/sql-{source.key}"
    assert adapter_problem(ctx) is None


def test_a_pvc_adapter_the_engines_cannot_reach_is_an_invalid_spec_naming_the_way_out() -> None:
    ctx = make_ctx({"adapters": [{"name": "sql", "source": "pvc://adapters/sql"}]})
    problem = adapter_problem(ctx) or ""
    assert "sql comes from claim adapters, which the engine pods do not mount" in problem
    assert "model.cacheVolumeClaim" in problem


def test_an_adapter_named_like_the_base_model_is_an_invalid_spec() -> None:
    ctx = make_ctx({"name": "base", "adapters": [{"name": "base", "source": "file:///a"}]})
    assert "base is the base model's served name" in (adapter_problem(ctx) or "")
    built_in = make_ctx({"adapters": [{"name": "smollm2-135m-instruct", "source": "file:///a"}]})
    assert adapter_problem(built_in) is not None  # the default served name counts too


def test_the_download_job_fetches_only_the_adapter_files_into_the_cache_claim() -> None:
    ctx = make_ctx({**HF_MODEL, "adapters": [{"name": "sql", "source": "hf://org/sql-lora@v1"}]})
    [source] = adapter_sources(ctx)
    job = drop_empty(build_adapter_job(ctx, source))
    validate_kubernetes(job)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["python", "-c"]
    assert "adapter_model.safetensors" in container["command"][2]
    assert container["command"][3] == "hf://org/sql-lora@v1"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "readOnly" not in mounts["/cache/huggingface"]  # the Job writes the claim
    assert job["metadata"]["labels"]["pagedock.dev/adapter"] == "sql"
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "adapter"


def test_the_copy_job_mounts_the_source_claim_read_only_and_renames_when_complete() -> None:
    ctx = make_ctx({**HF_MODEL, "adapters": [{"name": "sql", "source": "pvc://adapters/sql"}]})
    [source] = adapter_sources(ctx)
    job = drop_empty(build_adapter_job(ctx, source))
    validate_kubernetes(job)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][-2:] == ["/adapter-source/sql", source.lora_path]
    assert 'mv "$2.tmp" "$2"' in container["command"][2]
    claims = {v["name"]: v.get("persistentVolumeClaim") for v in pod["volumes"]}
    assert claims["adapter-source"] == {"claimName": "adapters", "readOnly": True}
    assert claims["model-cache"] == {"claimName": "hf-cache"}


def test_a_failed_job_says_why_in_its_own_words() -> None:
    ctx = make_ctx({**HF_MODEL, "adapters": [{"name": "sql", "source": "hf://org/gone"}]})
    [source] = adapter_sources(ctx)
    failed = {
        "type": "Failed",
        "status": "True",
        "message": "Job has reached the specified backoff limit",
    }
    job = {"metadata": {"name": "chat-adapter-1"}, "status": {"conditions": [failed]}}
    delivery = job_delivery(job, source)
    assert delivery.phase == "DownloadFailed"
    assert "could not download sql: Job has reached the specified backoff limit" in delivery.message
    assert job_delivery({"metadata": {"name": "j"}, "status": {"succeeded": 1}}, source).done


def engines(*served: dict[str, str] | None) -> list[EngineView]:
    return [
        EngineView(f"chat-engine-{i}", f"uid-{i}", f"10.0.0.{i}", s) for i, s in enumerate(served)
    ]


def test_the_plan_loads_what_a_replica_lacks_and_unloads_what_is_no_longer_declared() -> None:
    ctx = make_ctx({"adapters": [SQL, CHAT]})
    sources = adapter_sources(ctx)
    done = {s.name: Delivery("NotNeeded") for s in sources}
    fleet = engines(
        {"sql": "/adapters/sql", "chat": "/adapters/chat"},  # in line
        {"sql": "/adapters/sql", "old": "/adapters/old"},  # lacks chat, serves old
        None,  # did not answer: nothing to do there now
        {"sql": "/adapters/sql-v1", "chat": "/adapters/chat"},  # sql from another path: reload
    )
    actions = plan_actions(sources, done, fleet)
    assert [(e.pod, name) for e, name in actions.unloads] == [
        ("chat-engine-1", "old"),
        ("chat-engine-3", "sql"),
    ]
    assert [(e.pod, s.name) for e, s in actions.loads] == [
        ("chat-engine-1", "chat"),
        ("chat-engine-3", "sql"),
    ]


def test_an_adapter_whose_files_are_not_in_place_is_neither_loaded_nor_unloaded() -> None:
    sources = adapter_sources(make_ctx({"adapters": [SQL]}))
    actions = plan_actions(sources, {"sql": Delivery("Downloading")}, engines({}, {"sql": "/x"}))
    assert actions.loads == [] and actions.unloads == []


def test_status_is_ready_only_when_every_ready_replica_serves_the_adapter() -> None:
    [sql] = adapter_sources(make_ctx({"adapters": [SQL]}))
    done = Delivery("NotNeeded")
    both = adapter_status(
        sql, done, engines({"sql": "/adapters/sql"}, {"sql": "/adapters/sql"}), None
    )
    assert (both["state"], both["readyReplicas"]) == ("Ready", 2)
    half = adapter_status(sql, done, engines({"sql": "/adapters/sql"}, {}), None)
    assert (half["state"], half["readyReplicas"]) == ("Loading", 1)
    assert "1/2 ready engine replicas serve it; loading on chat-engine-1" in half["message"]
    none = adapter_status(sql, done, [], None)
    assert (none["state"], none["reason"]) == ("Loading", "NoReadyReplica")


def test_status_names_the_download_and_the_engines_refusal() -> None:
    [sql] = adapter_sources(make_ctx({"adapters": [SQL]}))
    running = adapter_status(sql, Delivery("Downloading", "Job j is running"), engines({}), None)
    assert (running["state"], running["message"]) == ("Downloading", "Job j is running")
    refused = adapter_status(sql, Delivery("NotNeeded"), engines({}), "pod p: rank 128 > 64")
    assert (refused["state"], refused["reason"], refused["message"]) == (
        "Failed",
        "LoadFailed",
        "pod p: rank 128 > 64",
    )


def test_the_printer_column_counts_ready_of_declared_and_failures_warn_once() -> None:
    entries = [
        {"name": "a", "state": "Ready", "reason": "Loaded", "message": ""},
        {"name": "b", "state": "Failed", "reason": "LoadFailed", "message": "bad rank"},
    ]
    assert adapters_ready(entries) == "1/2"
    assert adapter_warnings([], entries) == [("AdapterLoadFailed", "adapter b: bad rank")]
    assert adapter_warnings(entries, entries) == []
