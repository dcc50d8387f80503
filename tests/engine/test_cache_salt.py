"""vLLM's `cache_salt`: a request's prefix-cache blocks are shared only with requests of the same
salt (and adapter); unsalted requests share with each other, never with salted ones."""

from __future__ import annotations

import pytest

from engine.core.kv_events import BlockStored
from engine.core.request import Request, RequestTiming
from engine.core.scheduler import Scheduler
from engine.inputs.input_processor import InputProcessor
from engine.inputs.sampling_params import SamplingParams
from engine.sampling.parallel_sampling import child_requests
from pagedock.errors import InvalidRequestError
from pagedock.kv.block_hash import hash_blocks, lora_root_hash, salted_root_hash
from pagedock.limits import MAX_CACHE_SALT_CHARS
from tests.engine.factories import ROOT, make_request, make_scheduler, run_to_completion

TOKENS = list(range(10, 43))  # 33 tokens: four full blocks of 8 found cached on a full hit


def cached_tokens(scheduler: Scheduler, salt: str | None, lora: str | None = None) -> int:
    """Run a request for TOKENS with `salt`; the prompt tokens it found cached."""
    request = make_request(prompt=TOKENS, max_tokens=1)
    request.cache_salt, request.lora_name = salt, lora
    scheduler.add_request(request)
    run_to_completion(scheduler)
    return request.num_cached_tokens


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        ("tenant-a", "tenant-a", True),
        ("tenant-a", "tenant-b", False),
        (None, None, True),
        ("tenant-a", None, False),
        (None, "tenant-a", False),
    ],
)
def test_blocks_are_shared_only_between_requests_with_the_same_salt(
    first: str | None, second: str | None, shared: bool
) -> None:
    scheduler = make_scheduler(block_size=8)
    assert cached_tokens(scheduler, first) == 0
    assert cached_tokens(scheduler, second) == (32 if shared else 0)


def test_a_salt_does_not_cross_adapters() -> None:
    scheduler = make_scheduler(enable_lora=True, max_loras=2, block_size=8)
    assert cached_tokens(scheduler, "t", lora="sql") == 0
    assert cached_tokens(scheduler, "t") == 0
    assert cached_tokens(scheduler, "t", lora="chat") == 0
    assert cached_tokens(scheduler, "t", lora="sql") == 32


def test_salted_blocks_are_published_under_the_salted_chain() -> None:
    """What a router hashes for a salted request (pagedock/kv/block_hash.py) is what the engine
    publishes, for the base model and for an adapter alike."""
    scheduler = make_scheduler(enable_lora=True, max_loras=2, block_size=8)
    cached_tokens(scheduler, "t")
    cached_tokens(scheduler, "t", lora="sql")
    stored = [e for e in scheduler.take_kv_events() if isinstance(e, BlockStored)]
    by_adapter = {e.lora_name: e for e in stored}
    assert by_adapter[None].block_hashes == hash_blocks(TOKENS, 8, salted_root_hash(ROOT, "t"))
    sql_root = salted_root_hash(lora_root_hash(ROOT, "sql"), "t")
    assert by_adapter["sql"].block_hashes == hash_blocks(TOKENS, 8, sql_root)
    assert {e.cache_salt for e in stored} == {"t"}


def test_n_completions_of_a_salted_request_share_its_salt() -> None:
    processor = InputProcessor(None, vocab_size=1000, max_model_len=128)
    request = processor.process("r", TOKENS, SamplingParams(n=3, max_tokens=1), cache_salt="t")
    children = child_requests(request)
    assert [c.cache_salt for c in children] == ["t"] * 3
    core = Request.from_engine_request(children[0], [], timing=RequestTiming(0.0))
    assert core.cache_salt == "t"


@pytest.mark.parametrize("salt", ["", "x" * (MAX_CACHE_SALT_CHARS + 1), "\ud800"])
def test_an_empty_overlong_or_non_unicode_salt_is_refused_naming_it(salt: str) -> None:
    processor = InputProcessor(None, vocab_size=1000, max_model_len=128)
    with pytest.raises(InvalidRequestError) as e:
        processor.process("r", TOKENS, cache_salt=salt)
    assert e.value.param == "cache_salt"
