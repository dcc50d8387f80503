"""Conditions from the children's state, and fleet health from the engines' metrics."""

import dataclasses

from llm_operator.conditions import merge_conditions
from llm_operator.fleet.metrics import aggregate, parse_samples
from llm_operator.fleet.pod_failures import PodFailure
from llm_operator.fleet.status import ChildrenState, build_conditions, transition_warnings

METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.5
vllm:num_requests_waiting{model_name="m"} 3.0
vllm:num_requests_running{model_name="m"} 7.0
vllm:prefix_cache_hits_total{model_name="m"} 30.0
vllm:prefix_cache_queries_total{model_name="m"} 40.0
vllm:prefix_cache_hits_created{model_name="m"} 1.7e9
"""


def deployment(replicas: int, ready: int) -> dict:
    status = {
        "observedGeneration": 1,
        "replicas": replicas,
        "readyReplicas": ready,
        "updatedReplicas": ready,
    }
    return {"metadata": {"generation": 1}, "spec": {"replicas": replicas}, "status": status}


def by_type(conditions: list) -> dict:
    return {c.type: c for c in conditions}


def test_ready_needs_engine_and_router() -> None:
    state = ChildrenState(deployment(2, 1), deployment(1, 1), None, True, False)
    conditions = by_type(build_conditions(state, "m", 3))
    assert conditions["EngineReady"].status == "False"
    assert conditions["ModelReady"].status == "True"
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "EngineNotReady")
    assert conditions["Ready"].observed_generation == 3


def test_a_rollout_in_progress_is_not_ready() -> None:
    rolling = deployment(1, 1)
    rolling["metadata"]["generation"] = 2
    state = ChildrenState(rolling, None, None, False, False)
    assert by_type(build_conditions(state, "m", 1))["EngineReady"].status == "False"


def test_unchanged_condition_keeps_its_transition_time() -> None:
    state = ChildrenState(deployment(1, 1), None, None, False, False)
    first = merge_conditions([], build_conditions(state, "m", 1))
    old = [{**c, "lastTransitionTime": "2020-01-01T00:00:00Z"} for c in first]
    second = merge_conditions(old, build_conditions(state, "m", 1))
    assert {c["lastTransitionTime"] for c in second} == {"2020-01-01T00:00:00Z"}


PULL_FAILURE = PodFailure("ImagePullBackOff", 'pod chat-engine-abc: Back-off pulling image "x"')
REFUSAL = 'Deployment chat-engine: deployments.apps "chat-engine" is forbidden: no'


def test_a_pod_failure_names_the_cause_in_engine_model_and_ready() -> None:
    state = ChildrenState(deployment(1, 0), None, None, False, False, engine_failure=PULL_FAILURE)
    conditions = by_type(build_conditions(state, "m", 1))
    for type_ in ("EngineReady", "ModelReady", "Ready"):
        assert (conditions[type_].status, conditions[type_].reason) == ("False", "ImagePullBackOff")
        assert conditions[type_].message == PULL_FAILURE.message


def test_a_pod_failure_does_not_override_enough_ready_replicas() -> None:
    state = ChildrenState(deployment(1, 1), None, None, False, False, engine_failure=PULL_FAILURE)
    conditions = by_type(build_conditions(state, "m", 1))
    assert conditions["Ready"].reason == "AllReady"


def test_a_healthy_rollout_keeps_the_generic_reasons() -> None:
    state = ChildrenState(deployment(2, 1), None, None, False, False)
    conditions = by_type(build_conditions(state, "m", 1))
    assert conditions["EngineReady"].reason == "ReplicasNotReady"
    assert conditions["Ready"].reason == "EngineNotReady"


def test_a_refused_child_is_named_by_ready() -> None:
    state = ChildrenState(
        None, None, None, False, False, engine_failure=PULL_FAILURE, rejection=REFUSAL
    )
    ready = by_type(build_conditions(state, "m", 1))["Ready"]
    assert (ready.status, ready.reason, ready.message) == ("False", "ChildRejected", REFUSAL)


def warnings(old_state: ChildrenState | None, new_state: ChildrenState) -> list:
    old = merge_conditions([], build_conditions(old_state, "m", 1)) if old_state else []
    return transition_warnings(old, build_conditions(new_state, "m", 1))


def test_a_pod_failure_warns_once_per_reason() -> None:
    failing = ChildrenState(deployment(1, 0), None, None, False, False, engine_failure=PULL_FAILURE)
    assert warnings(None, failing) == [("ImagePullBackOff", PULL_FAILURE.message)]
    next_back_off = PodFailure("ImagePullBackOff", "pod chat-engine-def: Back-off pulling image")
    assert warnings(failing, dataclasses.replace(failing, engine_failure=next_back_off)) == []
    crashing = PodFailure("CrashLoopBackOff", "pod chat-engine-abc: back-off 10s")
    assert warnings(failing, dataclasses.replace(failing, engine_failure=crashing)) == [
        ("CrashLoopBackOff", crashing.message)
    ]


def test_the_kubelet_alternating_reasons_of_one_cause_warn_once() -> None:
    pulling = ChildrenState(
        deployment(1, 0),
        None,
        None,
        False,
        False,
        engine_failure=PodFailure("ErrImagePull", "pod chat-engine-abc: not found"),
    )
    assert warnings(pulling, dataclasses.replace(pulling, engine_failure=PULL_FAILURE)) == []


def test_a_refusal_warns_once_per_message() -> None:
    refused = ChildrenState(deployment(1, 1), None, None, False, False, rejection=REFUSAL)
    assert warnings(None, refused) == [("ChildRejected", REFUSAL)]
    assert warnings(refused, refused) == []
    other = dataclasses.replace(refused, rejection="ConfigMap chat-engine: invalid")
    assert warnings(refused, other) == [("ChildRejected", "ConfigMap chat-engine: invalid")]


def test_healthy_and_generic_states_do_not_warn() -> None:
    assert warnings(None, ChildrenState(deployment(2, 1), None, None, False, False)) == []


def test_metrics_are_summed_across_engines() -> None:
    samples = parse_samples(METRICS)
    stats = aggregate([samples, samples])
    assert stats is not None
    assert (stats.kv_cache_usage, stats.prefix_cache_hit_rate) == (0.5, 0.75)
    assert (stats.num_requests_waiting, stats.num_requests_running) == (6, 14)
    assert aggregate([]) is None


def test_zero_engines_by_autoscaling_policy_is_ready_scaled_to_zero() -> None:
    state = ChildrenState(
        deployment(0, 0), deployment(1, 1), None, True, False, zero_by_policy=True
    )
    conditions = by_type(build_conditions(state, "m", 3))
    assert {c.status for c in conditions.values()} == {"True"}
    assert (conditions["Ready"].reason, conditions["EngineReady"].reason) == (
        "ScaledToZero",
        "ScaledToZero",
    )


def test_zero_engines_without_the_policy_is_not_ready() -> None:
    state = ChildrenState(deployment(0, 0), deployment(1, 1), None, True, False)
    conditions = by_type(build_conditions(state, "m", 3))
    assert (conditions["Ready"].status, conditions["EngineReady"].reason) == (
        "False",
        "ScaledToZero",
    )
