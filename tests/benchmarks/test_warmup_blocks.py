"""Warm-up prompts that share no KV block with the measured ones."""

import pytest

from benchmarks.workloads import check_no_shared_block, shared_first_blocks, workload_a


def test_another_content_seed_shares_no_first_block_with_workload_a() -> None:
    measured = workload_a(49152, 64).prompts
    warmup = workload_a(49152, 64, content_seed=1_000).prompts[:8]
    assert shared_first_blocks(warmup, measured, block_size=8) == []
    check_no_shared_block(warmup, measured, block_size=8)


def test_the_same_prompts_share_every_first_block() -> None:
    measured = workload_a(49152, 4).prompts
    assert shared_first_blocks(measured[:2], measured, block_size=16) == [0, 1]
    with pytest.raises(ValueError, match=r"measured prompts \[0, 1\]"):
        check_no_shared_block(measured[:2], measured, block_size=16)


def test_a_prompt_that_differs_only_after_the_first_block_shares_it() -> None:
    measured = [[7] * 16 + [1, 2, 3]]
    assert shared_first_blocks([[7] * 16 + [9]], measured, block_size=16) == [0]
    assert shared_first_blocks([[7] * 15 + [9]], measured, block_size=16) == []
