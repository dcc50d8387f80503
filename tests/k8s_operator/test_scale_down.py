"""Cache-aware scale-down: deletion costs from the routers' prefix hit scores, and the demand of
several routers summed (llm_operator/autoscaler/scale_down.py, signals.py)."""

from __future__ import annotations

from llm_operator.autoscaler.scale_down import DELETION_COST, annotation_patches, coldest
from llm_operator.autoscaler.signals import combine, ready_pod_ips


def pod(name: str, ip: str, cost: str | None = None, ready: bool = True) -> dict:
    annotations = {DELETION_COST: cost} if cost is not None else {}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name, "annotations": annotations},
        "status": {"podIP": ip, "conditions": conditions},
    }


def test_the_pod_whose_cache_the_routers_used_least_goes_first() -> None:
    pods = [pod("hot", "10.0.0.1"), pod("cold", "10.0.0.2"), pod("warm", "10.0.0.3")]
    scores = {"10.0.0.1": 900.4, "10.0.0.2": 3.0, "10.0.0.3": 40.0}
    assert coldest(pods, scores) == "cold"
    patches = annotation_patches(pods, scores)
    assert patches["hot"] == {"metadata": {"annotations": {DELETION_COST: "900"}}}
    assert patches["cold"]["metadata"]["annotations"][DELETION_COST] == "3"


def test_an_unchanged_deletion_cost_is_not_written_again() -> None:
    assert annotation_patches([pod("a", "10.0.0.1", cost="5")], {"10.0.0.1": 5.2}) == {}


def test_several_routers_demand_is_summed_and_the_idle_time_is_the_shortest() -> None:
    one = {
        "num_held": 2,
        "num_inflight": 1,
        "idle_seconds": 40,
        "replicas": [{"url": "http://10.0.0.1:8000", "inflight": 1, "prefix_hit_score": 10}],
    }
    two = {
        "num_held": 3,
        "num_inflight": 0,
        "num_flow_queued": 4,
        "oldest_flow_queued_seconds": 7.5,
        "idle_seconds": 2,
        "replicas": [{"url": "http://10.0.0.1:8000", "inflight": 0, "prefix_hit_score": 5}],
    }
    demand = combine([one, two])
    assert demand is not None
    assert (demand.num_routers, demand.num_held, demand.num_inflight, demand.idle_seconds) == (
        2,
        5,
        1,
        2,
    )
    assert demand.prefix_hit_scores == {"10.0.0.1": 15.0}
    assert demand.num_queued == 4  # waiting in a router's flow queue: demand too
    assert demand.oldest_queued_seconds == 7.5  # the longest wait of any router's queue
    assert combine([]) is None


def test_only_ready_router_pods_are_polled() -> None:
    assert ready_pod_ips([pod("a", "10.0.0.2"), pod("b", "10.0.0.3", ready=False)]) == ["10.0.0.2"]


def test_engine_reported_load_counts_each_engine_once() -> None:
    replica = {
        "url": "http://10.0.0.1:8000",
        "inflight": 0,
        "num_requests_running": 3,
        "num_requests_waiting": 2,
    }
    demand = combine(
        [{"replicas": [replica]}, {"replicas": [{**replica, "num_requests_running": 1}]}]
    )
    assert demand is not None and demand.num_engine_requests == 5


def test_a_scale_event_is_about_the_llmdeployment_and_says_why() -> None:
    from llm_operator.autoscaler.events import build_event

    body = {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u1"},
    }
    event = build_event(body, "Scaled", "engine replicas 1 -> 2: concurrency 9 (3 held)")
    assert event["involvedObject"] == {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "name": "chat",
        "namespace": "team-a",
        "uid": "u1",
    }
    assert (event["reason"], event["type"], event["metadata"]["namespace"]) == (
        "Scaled",
        "Normal",
        "team-a",
    )
    assert event["metadata"]["name"].startswith("chat.")
