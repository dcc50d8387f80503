"""The scheduler's side of LoRA (torch-free): the max_loras slots with LRU eviction of idle
adapters, admission that waits for a slot, and hash chains that never cross adapters."""

from __future__ import annotations

from typing import Any

import pytest

from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request
from engine.lora.slots import LoRASlots
from pagedock.kv.block_hash import hash_block, hash_blocks, lora_root_hash
from tests.engine.factories import ROOT, make_request, make_scheduler, run_to_completion


def lora_request(lora_name: str | None, **kwargs: Any) -> Request:
    request = make_request(**kwargs)
    request.lora_name = lora_name
    return request


def test_an_adapter_with_running_requests_is_never_evicted() -> None:
    slots = LoRASlots(2)
    assert (slots.acquire("a"), slots.acquire("b")) == (0, 1)
    assert not slots.can_acquire("c")
    with pytest.raises(ValueError, match="every slot has running requests"):
        slots.acquire("c")
    slots.release(0)
    assert slots.can_acquire("c")
    assert slots.acquire("c") == 0  # a's slot: a was idle, b is not
    assert (slots.slot_of("a"), slots.slot_of("b"), slots.num_evictions) == (None, 1, 1)


def test_the_least_recently_used_idle_adapter_is_evicted_first() -> None:
    slots = LoRASlots(2)
    for name in ("a", "b", "a"):  # a used last
        slots.release(slots.acquire(name))
    assert slots.num_loads == 2  # the second "a" found it resident
    slots.acquire("c")
    assert (slots.slot_of("a"), slots.slot_of("b"), slots.slot_of("c")) == (0, None, 1)


def test_a_resident_adapter_takes_more_requests_without_a_load() -> None:
    slots = LoRASlots(1)
    assert slots.acquire("a") == slots.acquire("a") == 0
    assert (slots.pins, slots.num_loads, slots.running_adapters) == ([2], 1, ["a"])
    assert not slots.can_acquire("b") and slots.can_acquire("a") and slots.can_acquire(None)


def test_a_request_waits_for_a_slot_while_others_pass_it() -> None:
    scheduler = make_scheduler(enable_lora=True, max_loras=1)
    first, blocked, base = lora_request("a"), lora_request("b"), lora_request(None)
    for request in (first, blocked, base):
        scheduler.add_request(request)
    step = scheduler.schedule()
    assert [s.request_id for s in step.scheduled] == [first.request_id, base.request_id]
    assert [(s.lora_name, s.lora_slot) for s in step.scheduled] == [("a", 0), (None, -1)]
    assert list(scheduler.waiting) == [blocked]
    steps = run_to_completion(scheduler)
    later = next(s for step in steps for s in step.scheduled if s.request_id == blocked.request_id)
    assert (later.lora_name, later.lora_slot) == ("b", 0)
    assert scheduler.lora_slots is not None
    assert scheduler.lora_slots.pins == [0] and scheduler.lora_slots.num_evictions == 1


def test_with_priorities_a_request_waiting_for_a_slot_is_passed_over_too() -> None:
    scheduler = make_scheduler(enable_lora=True, max_loras=1, scheduling_policy="priority")
    first, blocked = lora_request("a", priority=0), lora_request("b", priority=1)
    base = lora_request(None, priority=2)
    for request in (base, blocked, first):
        scheduler.add_request(request)
    step = scheduler.schedule()
    assert [s.request_id for s in step.scheduled] == [first.request_id, base.request_id]
    assert list(scheduler.waiting) == [blocked]


def test_preemption_and_finishing_unpin_the_slots() -> None:
    scheduler = make_scheduler(num_blocks=6, enable_lora=True, max_loras=2, block_size=16)
    for i in range(6):
        scheduler.add_request(lora_request("ab"[i % 2], prompt=30, max_tokens=20))
    run_to_completion(scheduler)
    assert scheduler.num_preemptions > 0
    assert scheduler.lora_slots is not None and scheduler.lora_slots.pins == [0, 0]


def test_without_lora_the_scheduler_has_no_slots() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request())
    assert scheduler.lora_slots is None
    assert [s.lora_slot for s in scheduler.schedule().scheduled] == [-1]


def test_each_adapter_hashes_from_its_own_root_and_the_base_model_as_before() -> None:
    manager = KVCacheManager(num_blocks=16, block_size=4, root_hash=ROOT)
    tokens = list(range(10, 22))
    base, sql, chat = (lora_request(name, prompt=tokens) for name in (None, "sql", "chat"))
    for request in (base, sql, chat):
        manager.get_computed_blocks(request)
    assert base.block_hashes == hash_blocks(tokens, 4, ROOT)  # unchanged: what routers compute
    assert sql.block_hashes[0] == hash_block(lora_root_hash(ROOT, "sql"), tokens[:4])
    assert not {*base.block_hashes} & {*sql.block_hashes}
    assert not {*sql.block_hashes} & {*chat.block_hashes}
