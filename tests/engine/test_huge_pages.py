"""The CPU KV cache: zero pages from the kernel (nothing written at start), huge pages asked for
before its memory is first touched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from engine.model_config import ModelConfig
from engine.worker.huge_pages import HUGE_PAGE, advise_huge_pages, zeroed_tensor
from engine.worker.model_runner import allocate_kv_caches

THP = Path("/sys/kernel/mm/transparent_hugepage")


@pytest.mark.skipif(
    sys.platform != "linux" or not THP.exists(), reason="no transparent huge pages here"
)
def test_a_cache_spanning_whole_huge_pages_is_advised() -> None:
    assert advise_huge_pages(torch.empty(4 * HUGE_PAGE, dtype=torch.uint8)) is True


def test_memory_smaller_than_a_huge_page_is_left_alone() -> None:
    assert advise_huge_pages(torch.empty(1024, dtype=torch.uint8)) is False


def test_advice_changes_no_value() -> None:
    tensor = torch.arange(HUGE_PAGE, dtype=torch.float32)
    advise_huge_pages(tensor)
    assert torch.equal(tensor, torch.arange(HUGE_PAGE, dtype=torch.float32))


def test_the_kv_cache_starts_zeroed() -> None:
    config = ModelConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    caches = allocate_kv_caches(config, 4096, 16, torch.bfloat16, torch.device("cpu"))
    assert len(caches) == 2
    for k_cache, v_cache in caches:
        assert k_cache.shape == (4096, 16, 2, 8)
        assert not k_cache.any() and not v_cache.any()


def _resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/statm")
def test_a_zeroed_cache_writes_nothing_up_front_and_holds_what_is_written() -> None:
    """The pages come zeroed from the kernel when first touched: allocating 256 MiB leaves the
    resident set as it was (a zero_() pass would add all of it)."""
    before = _resident_bytes()
    tensor = zeroed_tensor((64, 1024, 1024), torch.float32)
    assert _resident_bytes() - before < 16 << 20
    tensor[3, 5, 7] = 2.5
    assert float(tensor[3, 5, 7]) == 2.5 and float(tensor[63].abs().sum()) == 0.0
    assert zeroed_tensor((0, 4), torch.bfloat16).shape == (0, 4)
