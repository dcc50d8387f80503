"""KVIndex: longest cached run of leading blocks per replica, from snapshots and deltas."""

from __future__ import annotations

from router.kv.kv_index import KVIndex
from tests.router.factories import h


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_match_counts_only_the_leading_run_of_blocks_each_replica_holds() -> None:
    index = KVIndex()
    index.reset("a", [h(1), h(2), h(3)])
    index.reset("b", [h(1), h(3)])
    assert index.match([h(1), h(2), h(3), h(4)], ["a", "b", "c"]) == {"a": 3, "b": 1, "c": 0}


def test_stored_and_removed_deltas_change_the_match() -> None:
    index = KVIndex()
    index.reset("a", [])
    index.store("a", [h(1), h(2)])
    index.remove("a", [h(2)])
    assert index.match([h(1), h(2)], ["a"]) == {"a": 1}


def test_a_snapshot_replaces_everything_known_of_the_replica() -> None:
    index = KVIndex()
    index.reset("a", [h(1), h(2)])
    index.reset("a", [h(9)])
    assert index.match([h(1)], ["a"]) == {"a": 0}
    assert index.num_blocks("a") == 1


def test_dropping_a_replica_forgets_its_blocks_but_not_the_others() -> None:
    index = KVIndex()
    index.reset("a", [h(1)])
    index.reset("b", [h(1)])
    index.drop("a")
    assert index.match([h(1)], ["a", "b"]) == {"a": 0, "b": 1}
    assert index.replicas() == ["b"]


def test_cleared_empties_the_replica() -> None:
    index = KVIndex()
    index.reset("a", [h(1)])
    index.clear("a")
    assert index.num_blocks("a") == 0


def test_pending_blocks_count_until_their_ttl_passes() -> None:
    clock = Clock()
    index = KVIndex(clock)
    index.add_pending("a", [h(1), h(2)], ttl_s=2.0)
    assert index.match([h(1), h(2)], ["a"]) == {"a": 2}
    clock.now = 2.5
    assert index.match([h(1), h(2)], ["a"]) == {"a": 0}


def test_a_stored_event_confirms_pending_blocks_beyond_their_ttl() -> None:
    clock = Clock()
    index = KVIndex(clock)
    index.add_pending("a", [h(1)], ttl_s=1.0)
    index.store("a", [h(1)])
    clock.now = 5.0
    index.add_pending("b", [h(7)], ttl_s=1.0)  # expires old entries
    assert index.match([h(1)], ["a"]) == {"a": 1}


def test_match_time_does_not_depend_on_cache_size() -> None:
    index = KVIndex()
    index.reset("a", [h(i) for i in range(50_000)])
    # The walk stops at the first block nobody holds: one lookup, whatever the cache holds.
    assert index.match([h(10**9), *[h(i) for i in range(10)]], ["a"]) == {"a": 0}
