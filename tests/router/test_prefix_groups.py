"""The KV index's blocks grouped by the prefix (chain start) they belong to, per replica, for the
dashboard: runs join their parent's group, snapshots are untraced, counts stay exact as blocks
come and go, and a view is capped."""

from __future__ import annotations

from router.kv.kv_index import KVIndex
from router.kv.prefix_groups import UNTRACED
from tests.router.factories import h


def groups(index: KVIndex, replica: str, limit: int = 10) -> dict[bytes, int]:
    return dict(index.groups.counts(replica, limit).groups)


def test_a_run_that_begins_its_chain_starts_a_group_and_its_continuations_join_it() -> None:
    index = KVIndex()
    index.store("a", [h(1), h(2)], parent=None)
    index.store("a", [h(3), h(4), h(5)], parent=h(2))
    index.store("a", [h(9)], parent=None)
    assert groups(index, "a") == {h(1): 5, h(9): 1}


def test_a_prefix_shared_by_two_replicas_is_one_group_on_each() -> None:
    index = KVIndex()
    index.store("a", [h(1), h(2)], parent=None)
    index.store("b", [h(1), h(2), h(3)], parent=None)
    assert groups(index, "a") == {h(1): 2}
    assert groups(index, "b") == {h(1): 3}


def test_snapshot_blocks_and_their_continuations_are_untraced() -> None:
    index = KVIndex()
    index.reset("a", [h(1), h(2)])
    index.store("a", [h(3)], parent=h(2))
    index.store("a", [h(7)], parent=h(6))  # a parent the index never saw
    counts = index.groups.counts("a", 10)
    assert counts.groups == []
    assert counts.untraced_blocks == 4


def test_a_snapshot_of_blocks_another_replica_traced_keeps_their_group() -> None:
    index = KVIndex()
    index.store("a", [h(1), h(2)], parent=None)
    index.reset("b", [h(1), h(2), h(8)])
    counts = index.groups.counts("b", 10)
    assert counts.groups == [(h(1), 2)]
    assert counts.untraced_blocks == 1


def test_removed_blocks_leave_their_group_and_an_empty_group_is_gone() -> None:
    index = KVIndex()
    index.store("a", [h(1), h(2), h(3)], parent=None)
    index.remove("a", [h(3), h(3), h(2)])  # a repeated hash counts once
    assert groups(index, "a") == {h(1): 1}
    index.remove("a", [h(1)])
    assert groups(index, "a") == {}
    assert index.groups.start_of(h(1)) is None


def test_storing_a_block_again_does_not_count_it_twice() -> None:
    index = KVIndex()
    index.store("a", [h(1), h(2)], parent=None)
    index.store("a", [h(2), h(3)], parent=h(1))
    index.store("a", [h(4), h(4)], parent=h(3))
    assert groups(index, "a") == {h(1): 4}


def test_dropping_a_replica_clears_its_groups_and_forgets_blocks_no_one_holds() -> None:
    index = KVIndex()
    index.store("a", [h(1), h(2)], parent=None)
    index.store("b", [h(1)], parent=None)
    index.drop("a")
    assert groups(index, "a") == {}
    assert index.groups.start_of(h(2)) is None
    assert index.groups.start_of(h(1)) == h(1)  # b still holds it


def test_dropping_in_slices_counts_each_block_out() -> None:
    index = KVIndex()
    index.store("a", [h(i) for i in range(1, 11)], parent=None)
    assert not index.drop_some("a", 4)
    assert sum(groups(index, "a").values()) == 6
    assert index.drop_some("a", 100)
    assert groups(index, "a") == {}


def test_cleared_empties_the_replicas_groups() -> None:
    index = KVIndex()
    index.store("a", [h(1)], parent=None)
    index.clear("a")
    assert index.groups.counts("a", 10).groups == []


def test_a_view_lists_the_largest_groups_and_sums_the_rest() -> None:
    index = KVIndex()
    for start in range(1, 21):  # group i holds i blocks
        run = [h(1000 * start + i) for i in range(start)]
        index.store("a", run, parent=None)
    index.reset("b", [])
    index.store("a", [h(999_999)])  # untraced
    counts = index.groups.counts("a", 3)
    assert [n for _, n in counts.groups] == [20, 19, 18]
    assert counts.groups[0][0] == h(20_000)
    assert counts.other_groups == 17
    assert counts.other_blocks == sum(range(1, 18))
    assert counts.untraced_blocks == 1


def test_a_view_of_thousands_of_prefixes_is_bounded_by_its_limit() -> None:
    index = KVIndex()
    index.store("a", [h(i) for i in range(5000)])  # untraced (a snapshot's)
    for i in range(5000, 8000):
        index.store("a", [h(i)], parent=None)
    counts = index.groups.counts("a", 48)
    assert len(counts.groups) == 48
    assert counts.other_groups == 3000 - 48
    assert counts.untraced_blocks == 5000
    assert UNTRACED not in dict(counts.groups)
