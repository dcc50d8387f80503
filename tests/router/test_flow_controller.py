"""FlowController: priority bands, fair shares between tenants, bounded queues, TTL and the
starvation guard (router/flow/flow_controller.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from router.flow import flow_controller
from router.flow.flow_controller import FlowController, FlowRefused, FlowTicket
from router.flow_config import FlowConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(10)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(flow_controller.time, "monotonic", clock)
    return clock


def make_flow(replicas: int = 1, **fields: Any) -> FlowController:
    config = FlowConfig(**{"max_inflight_per_replica": 1, **fields})
    return FlowController(config, lambda: replicas)


async def queued(flow: FlowController, tenant: str, priority: int = 0, cost: int = 10) -> Any:
    """An admit call that has run up to its wait (it enqueues without awaiting anything)."""
    task = asyncio.ensure_future(flow.admit(tenant, priority, cost))
    await asyncio.sleep(0)
    return task


async def order_granted(flow: FlowController, first: FlowTicket, tasks: list[Any]) -> list[str]:
    """Release slots one at a time; the tenants in the order their requests got one."""
    order, ticket, pending = [], first, set(tasks)
    while pending:
        ticket.release()
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, "one slot freed, one request granted"
        ticket = done.pop().result()
        order.append(ticket.tenant)
    return order


async def test_without_a_slot_limit_nothing_waits() -> None:
    flow = make_flow(max_inflight_per_replica=0)
    tickets = [await flow.admit("a", 0, 10) for _ in range(100)]
    assert flow.in_flight == 0 and not any(t.holds_slot for t in tickets)
    assert flow.vtc.counter("a") == 1000  # the tokens are still counted


async def test_a_request_waits_for_a_slot_and_gets_the_next_one() -> None:
    flow = make_flow(replicas=2)
    _, second = await flow.admit("a", 0, 1), await flow.admit("a", 0, 1)
    third = await queued(flow, "a")
    assert not third.done() and flow.in_flight == 2
    second.release()
    assert (await third).holds_slot and flow.in_flight == 2
    second.release()  # once only
    assert flow.in_flight == 2


async def test_a_light_tenant_goes_before_a_heavy_ones_backlog() -> None:
    flow = make_flow()
    first = await flow.admit("heavy", 0, 10)
    tasks = [await queued(flow, "heavy") for _ in range(4)] + [await queued(flow, "light")]
    order = await order_granted(flow, first, tasks)
    assert order.index("light") <= 1, order  # not behind all four of the heavy tenant's


async def test_fcfs_keeps_arrival_order() -> None:
    flow = make_flow(fairness="fcfs")
    first = await flow.admit("heavy", 0, 10)
    tasks = [await queued(flow, "heavy") for _ in range(4)] + [await queued(flow, "light")]
    assert await order_granted(flow, first, tasks) == ["heavy"] * 4 + ["light"]


async def test_a_more_urgent_band_goes_first() -> None:
    flow = make_flow()
    first = await flow.admit("batch", 10, 10)  # as many tokens as chat's: no token share
    tasks = [await queued(flow, "batch", 10), await queued(flow, "chat", 0)]
    assert await order_granted(flow, first, tasks) == ["chat", "batch"]


async def test_a_starving_low_band_request_goes_before_fresher_urgent_ones(clock: Clock) -> None:
    flow = make_flow(flow_starvation_s=5.0, fairness="fcfs")  # the slots that free, no shares
    first = await flow.admit("chat", 0, 1)
    low = await queued(flow, "batch", 10)
    clock.now += 6.0
    tasks = [low, await queued(flow, "chat", 0)]
    assert await order_granted(flow, first, tasks) == ["batch", "chat"]


async def test_under_a_flood_of_every_band_a_starving_band_gets_one_slot_not_all(
    clock: Clock,
) -> None:
    """Every head has waited past the guard: the low band gets one slot, then priority holds
    again until the low band has gone unserved for the guard's time once more (by age alone,
    all three batch requests would have gone first). fcfs: the slots that free, no shares."""
    flow = make_flow(flow_starvation_s=5.0, fairness="fcfs")
    first = await flow.admit("chat", 0, 1)
    batch = [await queued(flow, "batch", 10) for _ in range(3)]
    clock.now += 6.0
    chat = [await queued(flow, "chat", 0) for _ in range(3)]
    clock.now += 6.0
    order = await order_granted(flow, first, batch + chat)
    assert order == ["batch", "chat", "chat", "chat", "batch", "batch"]


async def test_a_full_band_sheds_the_heaviest_tenants_newest() -> None:
    flow = make_flow(flow_queue_size=2)
    flow.recent.add("light", 10, time.monotonic())  # served lately: no token share to go at once
    await flow.admit("heavy", 0, 1)
    older, newer = await queued(flow, "heavy"), await queued(flow, "heavy")
    light = await queued(flow, "light")
    with pytest.raises(FlowRefused) as shed:
        await newer
    assert shed.value.code == "fleet_saturated" and not older.done() and not light.done()
    with pytest.raises(FlowRefused, match="saturated"):  # heavy again: the newcomer is refused
        await flow.admit("heavy", 0, 1)
    assert flow.waiting() == 2


async def test_a_request_waits_no_longer_than_the_ttl() -> None:
    flow = make_flow(flow_queue_ttl_s=0.05)
    await flow.admit("a", 0, 1)
    with pytest.raises(FlowRefused) as refused:
        await flow.admit("a", 0, 1)
    assert refused.value.code == "queue_timeout" and flow.waiting() == 0


async def test_a_client_that_leaves_leaves_its_queue_and_its_slot() -> None:
    flow = make_flow()
    first = await flow.admit("a", 0, 1)
    waiting = await queued(flow, "a")
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert flow.waiting() == 0
    granted_then_gone = await queued(flow, "a")
    first.release()  # the slot is granted to it...
    granted_then_gone.cancel()  # ...as its client leaves: given back
    await asyncio.gather(granted_then_gone, return_exceptions=True)
    assert flow.in_flight == 0 and flow.waiting() == 0


async def test_a_tenant_below_its_share_never_waits_for_a_heavier_one() -> None:
    flow = make_flow(max_inflight_per_replica=4)
    heavy = [await flow.admit("heavy", 0, 10) for _ in range(4)]
    waiting_heavy = await queued(flow, "heavy")
    light = await flow.admit("light", 0, 10)  # its share is 4 // 2: it goes at once
    assert light.holds_slot and flow.in_flight == 5 and not waiting_heavy.done()
    heavy[0].release()  # the overshoot is taken back before the heavy tenant gets a slot
    assert flow.in_flight == 4 and not waiting_heavy.done()
    heavy[1].release()
    assert (await waiting_heavy).tenant == "heavy"
    second_light = await flow.admit("light", 0, 10)
    assert (flow.slots_held("heavy"), flow.slots_held("light")) == (3, 2)
    third_light = await queued(flow, "light", 0)  # at its share now: it waits like anyone
    assert not third_light.done()
    second_light.release()
    light.release()
    assert (await third_light).tenant == "light"


async def test_a_tenant_waiting_at_its_share_goes_when_its_own_request_ends() -> None:
    flow = make_flow(max_inflight_per_replica=4)
    [await flow.admit("heavy", 0, 10) for _ in range(4)]
    light = [await flow.admit("light", 10, 10) for _ in range(2)]  # its share: 4 // 2
    waiting = await queued(flow, "light")
    assert flow.in_flight == 6 and not waiting.done()
    light[0].release()  # below its share again: no wait for the heavy tenant's slots
    assert (await waiting).tenant == "light" and (
        flow.slots_held("heavy"),
        flow.slots_held("light"),
    ) == (4, 2)


async def test_a_less_urgent_band_takes_no_share_from_a_more_urgent_one() -> None:
    flow = make_flow(max_inflight_per_replica=4)
    batch = [await flow.admit("batch", 10, 10) for _ in range(4)]
    waiting_batch = await queued(flow, "batch", 10)
    chat = [await flow.admit("chat", 0, 10) for _ in range(4)]  # its band's share: all 4 slots
    assert flow.in_flight == 8 and not waiting_batch.done()
    waiting_chat = await queued(flow, "chat", 0)  # it holds its share: it waits
    assert not waiting_chat.done()
    chat[0].release()  # its own slot: it goes, before the batch tenant waiting longer
    assert (await waiting_chat).tenant == "chat" and not waiting_batch.done()
    for ticket in (*batch, *chat[1:]):
        ticket.release()
    assert (await waiting_batch).tenant == "batch"


async def test_the_shares_never_take_more_than_twice_the_slots() -> None:
    flow = make_flow(max_inflight_per_replica=4)
    [await flow.admit("batch", 10, 10) for _ in range(4)]
    [await flow.admit("chat", 0, 10) for _ in range(4)]  # its band's share: all 4 slots
    assert flow.in_flight == 8
    assert not (await queued(flow, "other", 10)).done()  # below a share of 4 // 3, but 8 run


async def test_a_tenant_served_well_under_its_share_of_tokens_goes_beyond_its_slots() -> None:
    flow = make_flow(max_inflight_per_replica=4)
    [await flow.admit("heavy", 0, 100) for _ in range(2)]
    [await flow.admit("light", 0, 10) for _ in range(2)]  # its slot share: 4 // 2
    third = await flow.admit("light", 0, 10)  # 20 of 220 tokens: under a quarter of them
    assert third.holds_slot and (flow.slots_held("heavy"), flow.slots_held("light")) == (2, 3)
    fourth = await queued(flow, "light", 0)  # 30 of 230 tokens: it goes too
    assert fourth.done()
    flow.recent.add("light", 200, time.monotonic())  # now served more than the heavy one
    assert not (await queued(flow, "light", 0)).done()


async def test_fcfs_has_no_shares() -> None:
    flow = make_flow(max_inflight_per_replica=2, fairness="fcfs")
    [await flow.admit("heavy", 0, 10) for _ in range(2)]
    assert not (await queued(flow, "light")).done()
