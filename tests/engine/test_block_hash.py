import struct

from pagedock.kv.block_hash import hash_block, hash_blocks, root_hash


def test_only_full_blocks_are_hashed() -> None:
    assert len(hash_blocks(list(range(47)), 16, root_hash("m"))) == 2


def test_a_block_hash_names_its_whole_prefix() -> None:
    root = root_hash("m")
    a = hash_blocks([1] * 16 + [2] * 16, 16, root)
    b = hash_blocks([3] * 16 + [2] * 16, 16, root)
    assert a[1] != b[1]


def test_hashes_extend_incrementally() -> None:
    root = root_hash("m")
    tokens = list(range(64))
    whole = hash_blocks(tokens, 16, root)
    first = hash_blocks(tokens[:32], 16, root)
    rest = hash_blocks(tokens, 16, root, parent=first[-1], start_block=2)
    assert first + rest == whole


def test_models_and_extra_keys_separate_the_chains() -> None:
    tokens = list(range(16))
    assert hash_blocks(tokens, 16, root_hash("a")) != hash_blocks(tokens, 16, root_hash("b"))
    assert root_hash("a") != root_hash("a", ["tenant-1"])


def test_the_chain_is_sha256_over_little_endian_int32() -> None:
    import hashlib

    root = root_hash("m")
    expected = hashlib.sha256(root + struct.pack("<16i", *range(16))).digest()
    assert hash_block(root, list(range(16))) == expected


def test_a_salt_starts_a_chain_of_its_own() -> None:
    from pagedock.kv.block_hash import request_root, salted_root_hash

    root, tokens = root_hash("m"), list(range(32))
    salted = hash_blocks(tokens, 16, salted_root_hash(root, "tenant-a"))
    assert salted != hash_blocks(tokens, 16, root)
    assert salted != hash_blocks(tokens, 16, salted_root_hash(root, "tenant-b"))
    assert salted == hash_blocks(tokens, 16, salted_root_hash(root, "tenant-a"))
    assert request_root(root, None) == root
    assert request_root(root, "tenant-a") == salted_root_hash(root, "tenant-a")


def test_a_salt_composes_with_an_adapters_root_and_never_meets_it() -> None:
    from pagedock.kv.block_hash import lora_root_hash, salted_root_hash

    root = root_hash("m")
    # The salt keys the adapter's root: same salt, other adapter (or none), other chain.
    on_sql = salted_root_hash(lora_root_hash(root, "sql"), "t")
    assert on_sql not in {salted_root_hash(root, "t"), lora_root_hash(root, "sql")}
    assert on_sql != salted_root_hash(lora_root_hash(root, "chat"), "t")
    # Domain separation: a salt never reads as an adapter's name, nor the reverse.
    assert salted_root_hash(root, "x") != lora_root_hash(root, "x")
