"""The waiting queue shared fairly between tenants (engine/core/fair_queue.py): a heavy tenant does
not starve a light one, priority comes first, a preempted request first within its priority, an
idle tenant banks no credit, and one tenant is served exactly as a plain queue serves it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine.core.fair_queue import FairQueue, make_waiting_queue
from engine.core.request import Request, RequestStatus, RequestTiming
from engine.core.request_queue import FCFSQueue, PriorityQueue
from engine.core.scheduler import Scheduler
from tests.engine.factories import (
    fake_runner_output,
    make_request,
    make_scheduler,
    run_to_completion,
)


def admission_order(sched: Scheduler, max_steps: int = 10_000) -> list[str]:
    """The request ids in the order they were first scheduled, running everything to the end."""
    order: list[str] = []
    for _ in range(max_steps):
        if not sched.has_unfinished_requests():
            return order
        out = sched.schedule()
        order += [s.request_id for s in out.scheduled if s.request_id not in order]
        sched.update(out, fake_runner_output(out))
    raise AssertionError("the scheduler made no progress")


def test_a_tenant_sending_ten_times_the_requests_does_not_starve_another() -> None:
    heavy = [make_request(8, max_tokens=4, tenant="heavy", arrival_time=i) for i in range(20)]
    light = [make_request(8, max_tokens=4, tenant="light", arrival_time=20 + i) for i in range(2)]
    fair, fcfs = make_scheduler(max_num_seqs=1), make_scheduler(max_num_seqs=1, fairness="fcfs")
    for sched in (fair, fcfs):
        for request in (*heavy, *light):
            sched.add_request(Request(**_copy_args(request)))
    fair_order, fcfs_order = admission_order(fair), admission_order(fcfs)
    assert [fair_order.index(r.request_id) for r in light] == [0, 1]  # 2 held of 22: light
    assert [fcfs_order.index(r.request_id) for r in light] == [20, 21]  # behind all the heavy


def test_tokens_not_requests_decide_whose_turn_it_is() -> None:
    queue = FairQueue("fcfs")
    long_prompts = [make_request(100, tenant="long", arrival_time=i) for i in range(3)]
    short_prompts = [make_request(10, tenant="short", arrival_time=10 + i) for i in range(3)]
    for request in (*long_prompts, *short_prompts):
        queue.add(request)
    order = []
    while len(queue):
        request = queue.select()
        assert request is not None
        queue.remove(request)
        queue.charge(request.tenant, request.num_prompt_tokens)
        order.append(request.tenant)
    assert order == ["long", "short", "short", "short", "long", "long"]


def test_priority_goes_before_the_fair_share() -> None:
    queue = FairQueue("priority")
    served = make_request(8, tenant="served", priority=0, arrival_time=2.0)
    idle = make_request(8, tenant="idle", priority=5, arrival_time=1.0)
    queue.add(idle)
    queue.add(served)
    queue.charge("served", 10_000)
    assert queue.select() is served


def test_within_a_priority_the_tenant_served_least_goes_first() -> None:
    queue = FairQueue("priority")
    served = make_request(8, tenant="served", priority=3, arrival_time=1.0)
    idle = make_request(8, tenant="idle", priority=3, arrival_time=2.0)
    queue.add(served)
    queue.add(idle)
    queue.charge("served", 100)
    assert queue.select() is idle


def test_a_preempted_request_goes_before_other_tenants_newcomers() -> None:
    queue = FairQueue("fcfs")
    newcomer = make_request(8, tenant="light", arrival_time=1.0)
    queue.add(newcomer)
    preempted = make_request(8, tenant="heavy", arrival_time=0.0)
    preempted.status = RequestStatus.PREEMPTED
    queue.charge("heavy", 10_000)
    queue.prepend(preempted)
    assert queue.select() is preempted


def test_a_tenant_that_was_idle_banks_no_credit() -> None:
    queue = FairQueue("fcfs")
    busy = make_request(8, tenant="busy")
    queue.add(busy)
    queue.remove(busy)
    queue.charge("busy", 500)  # served while nobody else waited
    queue.add(make_request(8, tenant="busy"))
    queue.add(make_request(8, tenant="back"))
    assert queue.fair_share.counter("back") == 500  # lifted to the busy tenant's counter
    queue.remove(next(r for r in queue if r.tenant == "busy"))
    queue.remove(next(iter(queue)))
    queue.charge("busy", 300)
    queue.add(make_request(8, tenant="late"))  # nobody waits: joins the last one to leave
    assert queue.fair_share.counter("late") == 500


def test_remove_and_pop_keep_the_count_and_drop_empty_tenants() -> None:
    queue = FairQueue("fcfs")
    a, b = make_request(4, tenant="a"), make_request(4, tenant="b")
    queue.add(a)
    queue.add(b)
    assert queue.peek() is a and queue.pop() is a
    queue.remove(b)
    assert len(queue) == 0 and list(queue) == []


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_one_tenant_is_served_exactly_as_the_plain_queue_serves_it(policy: str) -> None:
    rng = random.Random(37)
    requests = [
        make_request(
            rng.randint(4, 120),
            max_tokens=rng.randint(1, 24),
            priority=rng.randint(0, 2),
            arrival_time=round(rng.uniform(0, 0.5), 3),
        )
        for _ in range(40)
    ]
    outputs = []
    for fairness in ("vtc", "fcfs"):
        sched = make_scheduler(
            num_blocks=24,
            max_num_seqs=6,
            max_num_batched_tokens=64,
            scheduling_policy=policy,
            fairness=fairness,
        )
        for request in requests:
            sched.add_request(Request(**_copy_args(request)))
        steps = []
        while sched.has_unfinished_requests():
            out = sched.schedule()
            steps.append(
                ([(s.request_id, s.num_new_tokens) for s in out.scheduled], out.preempted_req_ids)
            )
            sched.update(out, fake_runner_output(out))
        outputs.append(steps)
    assert outputs[0] == outputs[1]
    assert any(preempted for _, preempted in outputs[0])  # the pool was small enough to preempt


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_with_many_tenants_and_a_small_pool_every_request_finishes(policy: str) -> None:
    rng = random.Random(7)
    sched = make_scheduler(num_blocks=12, max_num_seqs=4, scheduling_policy=policy)
    requests = [
        make_request(
            rng.randint(4, 60),
            max_tokens=rng.randint(1, 40),
            priority=rng.randint(0, 1),
            tenant=rng.choice(["a", "a", "a", "b", "c"]),
            arrival_time=i * 0.01,
        )
        for i in range(30)
    ]
    for request in requests:
        sched.add_request(request)
    run_to_completion(sched)
    assert all(r.is_finished for r in requests)
    assert sched.num_preemptions > 0 and len(sched.waiting) == 0


def test_an_empty_queue_has_no_head() -> None:
    with pytest.raises(IndexError):
        FairQueue("fcfs").peek()


def test_fairness_picks_the_queue() -> None:
    assert isinstance(make_waiting_queue("fcfs", "fcfs"), FCFSQueue)
    assert isinstance(make_waiting_queue("priority", "fcfs"), PriorityQueue)
    assert isinstance(make_waiting_queue("priority", "vtc"), FairQueue)
    with pytest.raises(ValueError, match="unknown fairness"):
        make_waiting_queue("fcfs", "lottery")


def _copy_args(request: Request) -> dict[str, Any]:
    """A fresh request like `request` (same id, prompt, params, arrival and tenant)."""
    return {
        "request_id": request.request_id,
        "prompt_token_ids": request.prompt_token_ids,
        "sampling_params": request.sampling_params,
        "eos_token_ids": request.eos_token_ids,
        "priority": request.priority,
        "timing": RequestTiming(request.arrival_time),
        "tenant": request.tenant,
    }
