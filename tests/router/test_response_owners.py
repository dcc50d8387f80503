"""ResponseOwners: the bounded map from a response id to the replica that produced it."""

from __future__ import annotations

from router.policies.response_owners import ResponseOwners


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_learnt_id_names_its_replica_for_its_tenant_only() -> None:
    owners = ResponseOwners(10, 60)
    owners.learn("a", "resp_1", "http://r1")
    assert owners.owner("a", "resp_1") == "http://r1"
    assert owners.owner("b", "resp_1") is None
    assert owners.owner("a", "resp_2") is None


def test_the_least_recently_used_id_goes_first_past_the_cap() -> None:
    owners = ResponseOwners(2, 60)
    owners.learn("t", "resp_1", "http://r1")
    owners.learn("t", "resp_2", "http://r2")
    assert owners.owner("t", "resp_1") == "http://r1"  # used: resp_2 is now the oldest
    owners.learn("t", "resp_3", "http://r3")
    assert len(owners) == 2
    assert owners.owner("t", "resp_2") is None
    assert owners.owner("t", "resp_1") == "http://r1"
    assert owners.owner("t", "resp_3") == "http://r3"


def test_an_id_is_forgotten_after_its_ttl() -> None:
    clock = Clock()
    owners = ResponseOwners(10, 60, clock)
    owners.learn("t", "resp_1", "http://r1")
    clock.now += 59.9
    assert owners.owner("t", "resp_1") == "http://r1"
    clock.now += 0.2
    assert owners.owner("t", "resp_1") is None
    assert len(owners) == 0


def test_a_ttl_of_zero_keeps_an_id_until_evicted() -> None:
    clock = Clock()
    owners = ResponseOwners(10, 0, clock)
    owners.learn("t", "resp_1", "http://r1")
    clock.now += 10**9
    assert owners.owner("t", "resp_1") == "http://r1"


def test_a_deleted_id_is_forgotten_and_a_zero_cap_remembers_nothing() -> None:
    owners = ResponseOwners(10, 60)
    owners.learn("t", "resp_1", "http://r1")
    owners.forget("t", "resp_1")
    owners.forget("t", "resp_unknown")
    assert owners.owner("t", "resp_1") is None
    none_kept = ResponseOwners(0, 60)
    none_kept.learn("t", "resp_1", "http://r1")
    assert len(none_kept) == 0
