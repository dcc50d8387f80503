"""What the scheduler reports of LoRA between steps (vLLM's SchedulerStats fields): the running
and the waiting requests per adapter, adapters in the order they got their oldest unfinished
request; nothing with LoRA off."""

from __future__ import annotations

from typing import Any

from engine.core.request import Request
from engine.core.scheduler_stats import lora_request_counts, scheduler_stats
from tests.engine.factories import fake_runner_output, make_request, make_scheduler


def lora_request(lora_name: str | None, **kwargs: Any) -> Request:
    request = make_request(**kwargs)
    request.lora_name = lora_name
    return request


def test_requests_are_counted_per_adapter_running_and_waiting() -> None:
    # One slot: "sql" runs, "chat" waits for the slot, the base model's requests run beside.
    scheduler = make_scheduler(enable_lora=True, max_loras=1)
    for name in ("sql", "chat", None, "sql", "chat"):
        scheduler.add_request(lora_request(name))
    scheduler.schedule()
    stats = scheduler_stats(scheduler)
    assert stats.running_lora_adapters == {"sql": 2}
    assert stats.waiting_lora_adapters == {"chat": 2}
    assert (stats.num_running, stats.num_waiting) == (3, 2)


def test_adapters_are_listed_in_the_order_of_their_oldest_unfinished_request() -> None:
    requests = [lora_request(n) for n in ("code", "sql", None, "chat", "sql", "code")]
    counts = lora_request_counts(requests)  # all waiting: none was scheduled
    assert list(counts["waiting_lora_adapters"]) == ["code", "sql", "chat"]
    assert counts["waiting_lora_adapters"] == {"code": 2, "sql": 2, "chat": 1}
    assert counts["running_lora_adapters"] == {}


def test_finished_requests_leave_the_counts() -> None:
    scheduler = make_scheduler(enable_lora=True, max_loras=2)
    scheduler.add_request(lora_request("sql", max_tokens=1))
    scheduler.add_request(lora_request("chat", max_tokens=3))
    output = scheduler.schedule()
    scheduler.update(output, fake_runner_output(output))  # "sql" got its one token
    stats = scheduler_stats(scheduler)
    assert stats.running_lora_adapters == {"chat": 1}
    assert stats.waiting_lora_adapters == {}


def test_a_preempted_request_counts_as_waiting() -> None:
    scheduler = make_scheduler(num_blocks=4, enable_lora=True, max_loras=2, block_size=16)
    first, second = lora_request("sql", prompt=30), lora_request("chat", prompt=30)
    scheduler.add_request(first)
    scheduler.add_request(second)
    output = scheduler.schedule()
    scheduler.update(output, fake_runner_output(output))
    while not scheduler.num_preemptions:
        output = scheduler.schedule()
        scheduler.update(output, fake_runner_output(output))
    stats = scheduler_stats(scheduler)
    assert stats.running_lora_adapters == {"sql": 1}
    assert stats.waiting_lora_adapters == {"chat": 1}


def test_with_lora_off_no_adapter_is_reported() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request())
    scheduler.schedule()
    stats = scheduler_stats(scheduler)
    assert stats.running_lora_adapters == {} and stats.waiting_lora_adapters == {}
