from engine.core.block_pool import BlockPool
from engine.core.kv_events import BlockRemoved, BlockStored
from pagedock.kv.block_hash import hash_block
from tests.engine.factories import ROOT


def test_new_blocks_come_from_the_least_recently_freed_end() -> None:
    pool = BlockPool(4, 16)
    a, b = pool.get_new_blocks(2)
    pool.free_blocks([b, a])
    # 2 and 3 were never used (head of the queue), then b, then a.
    assert [blk.block_id for blk in pool.get_new_blocks(4)] == [2, 3, b.block_id, a.block_id]


def test_freeing_takes_a_block_back_only_when_its_last_reference_goes() -> None:
    pool = BlockPool(2, 16)
    (block,) = pool.get_new_blocks(1)
    pool.touch([block])
    pool.free_blocks([block])
    assert pool.num_free_blocks == 1
    pool.free_blocks([block])
    assert pool.num_free_blocks == 2


def test_a_prefix_hit_revives_a_free_cached_block_from_the_middle_of_the_queue() -> None:
    pool = BlockPool(3, 16)
    blocks = pool.get_new_blocks(3)
    h = hash_block(ROOT, list(range(16)))
    pool.cache_full_blocks([blocks[1]], [h], None)
    pool.free_blocks(blocks)
    hit = pool.get_cached_block(h)
    assert hit is blocks[1]
    pool.touch([hit])
    assert pool.num_free_blocks == 2
    assert hit not in list(pool.free_queue)


def test_evicting_a_cached_block_removes_its_hash_and_records_the_event() -> None:
    pool = BlockPool(1, 16)
    (block,) = pool.get_new_blocks(1)
    h = hash_block(ROOT, list(range(16)))
    pool.cache_full_blocks([block], [h], None)
    pool.free_blocks([block])
    pool.get_new_blocks(1)
    assert pool.get_cached_block(h) is None
    assert pool.take_events() == [BlockStored([h], None, 16), BlockRemoved([h])]
    assert pool.take_events() == []


def test_a_hash_already_cached_elsewhere_is_not_cached_twice() -> None:
    pool = BlockPool(2, 16)
    a, b = pool.get_new_blocks(2)
    h = hash_block(ROOT, list(range(16)))
    pool.cache_full_blocks([a], [h], None)
    pool.cache_full_blocks([b], [h], None)
    assert pool.get_cached_block(h) is a
    assert b.block_hash is None


def test_the_prefix_cache_resets_only_when_no_block_is_in_use() -> None:
    pool = BlockPool(2, 16)
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [hash_block(ROOT, [1] * 16)], None)
    assert not pool.reset_prefix_cache()
    pool.free_blocks([block])
    assert pool.reset_prefix_cache()
    assert pool.cached_blocks == {}


def test_stored_events_carry_their_tokens_and_split_where_a_block_was_already_cached() -> None:
    pool = BlockPool(8, 4)
    tokens = list(range(12))
    h = [hash_block(ROOT, tokens[:4])]
    h += [hash_block(h[0], tokens[4:8]), hash_block(hash_block(h[0], tokens[4:8]), tokens[8:])]
    (other,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([other], [h[1]], h[0], tokens[4:8])  # another request had block 1
    pool.take_events()
    pool.cache_full_blocks(pool.get_new_blocks(3), h, None, tokens)
    # Each event's parent is the block just before its first, so the chain is rebuildable.
    assert pool.take_events() == [
        BlockStored([h[0]], None, 4, tokens[:4]),
        BlockStored([h[2]], h[1], 4, tokens[8:]),
    ]
