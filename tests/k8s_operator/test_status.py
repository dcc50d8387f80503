"""Conditions from the children's state, and fleet health from the engines' metrics."""

from llm_operator.conditions import merge_conditions
from llm_operator.metrics import aggregate, parse_samples
from llm_operator.status import ChildrenState, build_conditions

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


def test_metrics_are_summed_across_engines() -> None:
    samples = parse_samples(METRICS)
    stats = aggregate([samples, samples])
    assert stats is not None
    assert (stats.kv_cache_usage, stats.prefix_cache_hit_rate) == (0.5, 0.75)
    assert (stats.num_requests_waiting, stats.num_requests_running) == (6, 14)
    assert aggregate([]) is None
