"""The emulated Deployment controller's rolling update: surge first, then old pods as the new
ones are ready, never below `replicas - maxUnavailable` ready pods."""

from __future__ import annotations

from typing import Any

from tests.e2e.rolling_update import budgets, rollout_step

Obj = dict[str, Any]


def deployment(replicas: int, surge: int | str, unavailable: int | str) -> Obj:
    rolling = {"maxSurge": surge, "maxUnavailable": unavailable}
    return {"spec": {"replicas": replicas, "strategy": {"rollingUpdate": rolling}}}


def pods(*ready: bool) -> list[Obj]:
    return [{"name": f"p{i}", "ready": r} for i, r in enumerate(ready)]


def is_ready(pod: Obj) -> bool:
    return bool(pod["ready"])


def test_one_surge_pod_first_and_no_old_pod_goes_before_it_is_ready() -> None:
    d = deployment(3, 1, 0)
    step = rollout_step(d, [], pods(True, True, True), is_ready)
    assert step.num_new == 1 and step.old_to_delete == []
    step = rollout_step(d, pods(False), pods(True, True, True), is_ready)
    assert step.num_new == 0 and step.old_to_delete == []


def test_an_old_pod_goes_once_a_new_one_is_ready_and_the_next_surges() -> None:
    d = deployment(3, 1, 0)
    old = pods(True, True, True)
    step = rollout_step(d, pods(True), old, is_ready)
    assert step.num_new == 0 and len(step.old_to_delete) == 1
    step = rollout_step(d, pods(True), old[1:], is_ready)  # the deleted one left the count
    assert step.num_new == 1 and step.old_to_delete == []


def test_unready_old_pods_go_first() -> None:
    d = deployment(3, 1, 0)
    old = pods(False, True, True)
    assert rollout_step(d, pods(False), old, is_ready).old_to_delete == []
    assert rollout_step(d, pods(True), old, is_ready).old_to_delete == [old[0]]


def test_without_surge_one_old_pod_goes_before_its_replacement_is_made() -> None:
    d = deployment(2, 0, 1)  # the operator's GPU strategy
    step = rollout_step(d, [], pods(True, True), is_ready)
    assert step.num_new == 0 and len(step.old_to_delete) == 1


def test_percentages_round_surge_up_and_unavailable_down() -> None:
    assert budgets({}, 3) == (1, 0)  # 25 %: 0.75 up is 1, down is 0
    assert budgets({"maxSurge": "50%", "maxUnavailable": "50%"}, 3) == (2, 1)
    assert budgets({"maxSurge": 0, "maxUnavailable": 0}, 3) == (1, 0)


def test_recreate_deletes_every_old_pod_before_making_new_ones() -> None:
    d = {"spec": {"replicas": 2, "strategy": {"type": "Recreate"}}}
    old = pods(True, True)
    assert rollout_step(d, [], old, is_ready).old_to_delete == old
    assert rollout_step(d, [], old, is_ready).num_new == 0
    assert rollout_step(d, [], [], is_ready).num_new == 2
