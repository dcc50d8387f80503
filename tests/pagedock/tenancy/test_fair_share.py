from __future__ import annotations

from pagedock.tenancy.fair_share import VirtualTokenCounter


def test_the_tenant_served_least_goes_next() -> None:
    vtc = VirtualTokenCounter()
    vtc.charge("a", 500)
    vtc.charge("b", 100)
    assert vtc.pick(["a", "b"]) == "b"
    vtc.charge("b", 1000)
    assert vtc.pick(["a", "b"]) == "a"


def test_an_idle_tenant_banks_no_credit() -> None:
    vtc = VirtualTokenCounter()
    vtc.charge("a", 10_000)  # a ran alone for a while
    vtc.backlogged("b", ["a"])  # b arrives: it starts level with a, not 10,000 tokens behind
    assert vtc.counter("b") == 10_000
    vtc.charge("b", 5)
    assert vtc.pick(["a", "b"]) == "a"


def test_a_tenant_ahead_keeps_its_counter_when_backlogged_again() -> None:
    vtc = VirtualTokenCounter()
    vtc.charge("a", 50)
    vtc.charge("b", 80)
    vtc.backlogged("b", ["a"])
    assert vtc.counter("b") == 80
    vtc.backlogged("c", [])  # nobody else waits: nothing to level with
    assert vtc.counter("c") == 0
