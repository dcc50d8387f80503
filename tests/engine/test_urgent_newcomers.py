"""A step's newcomers (the waiting queue's begin_step / shares_step): a light tenant's prompt or a
more urgent one is prefilled in a step of its own beside the running decodes, and what it passed
follows in the next step; tenants of equal standing, and one tenant's prompts, still share."""

from __future__ import annotations

import pytest

from engine.core.scheduler import Scheduler
from tests.engine.factories import fake_runner_output, make_request, make_scheduler


def running_scheduler(tenants: dict[str, int], **config: object) -> Scheduler:
    """A scheduler whose running set holds `tenants[name]` decoding requests of each tenant."""
    sched = make_scheduler(max_num_batched_tokens=2048, **config)
    for tenant, count in tenants.items():
        for _ in range(count):
            sched.add_request(make_request(8, max_tokens=100, tenant=tenant, arrival_time=0.0))
    while len(sched.waiting):  # a light tenant's prompts go first, in a step of their own
        out = sched.schedule()
        sched.update(out, fake_runner_output(out))
    assert len(sched.running) == sum(tenants.values()) and not len(sched.waiting)
    return sched


def newcomers(sched: Scheduler) -> list[str]:
    """The ids of the requests the next step prefills (it runs)."""
    out = sched.schedule()
    sched.update(out, fake_runner_output(out))
    return [s.request_id for s in out.scheduled if not s.is_decode]


def test_a_light_tenants_prompt_is_prefilled_without_a_heavy_tenants_beside_it() -> None:
    sched = running_scheduler({"heavy": 6})
    heavy = make_request(64, tenant="heavy", arrival_time=1.0)
    light = make_request(64, tenant="light", arrival_time=2.0)
    sched.add_request(heavy)
    sched.add_request(light)
    assert newcomers(sched) == [light.request_id]  # first, though it came later, and alone
    assert newcomers(sched) == [heavy.request_id]  # the next step


def test_a_light_tenants_prompt_goes_without_a_heavy_tenants_chunks_in_progress() -> None:
    sched = running_scheduler({"heavy": 4}, long_prefill_token_threshold=64)
    long = make_request(300, tenant="heavy", arrival_time=1.0)
    sched.add_request(long)
    assert newcomers(sched) == [long.request_id]  # its first chunk
    light = make_request(32, tenant="light", arrival_time=2.0)
    sched.add_request(light)
    assert newcomers(sched) == [light.request_id]  # the chunk in progress waits a step
    assert newcomers(sched) == [long.request_id]
    level = make_request(32, tenant="heavy", arrival_time=3.0)
    sched.add_request(level)  # its own tenant's newcomer shares the chunk's step
    assert sorted(newcomers(sched)) == sorted([long.request_id, level.request_id])


def test_a_light_tenants_own_prompts_share_its_step() -> None:
    sched = running_scheduler({"heavy": 6, "light": 1})
    sched.add_request(make_request(64, tenant="heavy", arrival_time=1.0))
    own = [make_request(32, tenant="light", arrival_time=2.0 + i) for i in range(2)]
    for request in own:
        sched.add_request(request)
    assert newcomers(sched) == [r.request_id for r in own]


def test_tenants_at_their_share_share_a_step_as_before() -> None:
    sched = running_scheduler({"a": 3, "b": 3})
    first = make_request(64, tenant="a", arrival_time=1.0)
    second = make_request(64, tenant="b", arrival_time=2.0)
    sched.add_request(first)
    sched.add_request(second)
    assert sorted(newcomers(sched)) == sorted([first.request_id, second.request_id])


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_an_idle_engine_prefills_level_tenants_prompts_together(policy: str) -> None:
    sched = make_scheduler(max_num_batched_tokens=2048, scheduling_policy=policy)
    requests = [make_request(64, tenant=t, priority=i, arrival_time=i) for i, t in enumerate("abc")]
    for request in requests:
        sched.add_request(request)
    assert len(newcomers(sched)) == 3  # nobody runs: nobody is light, none more urgent


def test_an_idle_engine_prefills_a_light_tenants_prompt_before_a_heavy_tenants_backlog() -> None:
    sched = make_scheduler(max_num_batched_tokens=2048)
    heavy = [make_request(64, tenant="heavy", arrival_time=i) for i in range(4)]
    light = make_request(64, tenant="light", arrival_time=5.0)
    for request in (*heavy, light):
        sched.add_request(request)
    assert newcomers(sched) == [light.request_id]  # it holds 1 of 5: under its share
    assert newcomers(sched) == [r.request_id for r in heavy]


@pytest.mark.parametrize("fairness", ["vtc", "fcfs"])
def test_a_more_urgent_prompt_is_prefilled_without_less_urgent_ones(fairness: str) -> None:
    sched = running_scheduler({"batch": 4}, scheduling_policy="priority", fairness=fairness)
    batch = [make_request(64, priority=10, tenant="batch", arrival_time=1.0) for _ in range(2)]
    chat = make_request(64, priority=0, tenant="batch", arrival_time=2.0)
    for request in (*batch, chat):
        sched.add_request(request)
    assert newcomers(sched) == [chat.request_id]
    assert sorted(newcomers(sched)) == sorted(r.request_id for r in batch)


def test_first_come_first_served_never_splits_a_step() -> None:
    sched = running_scheduler({"heavy": 6}, fairness="fcfs")
    requests = [make_request(64, tenant=t, arrival_time=i) for i, t in enumerate(["heavy", "b"])]
    for request in requests:
        sched.add_request(request)
    assert newcomers(sched) == [r.request_id for r in requests]
