"""EngineConfig.kv_cache_dtype: what each setting stores, what it refuses, and that an engine with
a bf16 cache on the CPU holds twice the blocks for the same memory, generates, and frees them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from engine.config import EngineConfig
from engine.device import pick_kv_cache_dtype
from engine.kernels import cpu_kernels
from engine.loader.model_loader import read_model_config
from engine.runtime.weights_identity import hash_root_name
from engine.worker.model_runner import kv_cache_bytes_per_block
from pagedock.errors import ConfigError

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def restore_cpu_kernels() -> Iterator[None]:
    yield
    cpu_kernels.set_cpu_kernels_enabled(True)  # the switch is process-wide


def test_an_unknown_kv_cache_dtype_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"kv_cache_dtype must be one of .*'int4'"):
        EngineConfig(kv_cache_dtype="int4")


def test_auto_stores_the_activation_dtype_under_float32_gemms_and_on_gpus() -> None:
    assert pick_kv_cache_dtype("auto", torch.float32, CPU) == torch.float32
    assert pick_kv_cache_dtype("auto", torch.float32, CPU, torch.float32) == torch.float32
    assert pick_kv_cache_dtype("auto", torch.bfloat16, CUDA, torch.bfloat16) == torch.bfloat16
    assert pick_kv_cache_dtype("float32", torch.float32, CPU) == torch.float32
    assert pick_kv_cache_dtype("bfloat16", torch.bfloat16, CUDA) == torch.bfloat16


def test_bf16_and_int8_under_float32_activations_on_the_cpu() -> None:
    assert pick_kv_cache_dtype("bfloat16", torch.float32, CPU) == torch.bfloat16
    assert pick_kv_cache_dtype("int8", torch.float32, CPU) == torch.int8
    # int8 is lossy beyond bf16: auto never picks it.
    assert pick_kv_cache_dtype("auto", torch.float32, CPU, torch.bfloat16) != torch.int8


def test_auto_stores_bf16_where_a_cpu_engine_multiplies_in_bf16() -> None:
    assert pick_kv_cache_dtype("auto", torch.float32, CPU, torch.bfloat16) == torch.bfloat16
    # An explicit float32 cache keeps float32 beside bf16 GEMMs.
    assert pick_kv_cache_dtype("float32", torch.float32, CPU, torch.bfloat16) == torch.float32


@pytest.mark.parametrize(
    ("name", "dtype", "device"),
    [
        ("float32", torch.bfloat16, CUDA),  # the GPU path stores its activation dtype only
        ("bfloat16", torch.float32, CUDA),
        ("float32", torch.bfloat16, CPU),  # no read path widens bf16 activations' cache
        ("int8", torch.bfloat16, CUDA),  # the GPU kernels read no quantised rows
        ("int8", torch.bfloat16, CPU),
    ],
)
def test_pairings_without_a_read_path_are_config_errors(
    name: str, dtype: torch.dtype, device: torch.device
) -> None:
    with pytest.raises(ConfigError, match=f"kv_cache_dtype {name} is not supported"):
        pick_kv_cache_dtype(name, dtype, device)


def make_llm(model_dir: Path, **settings: Any) -> LLM:
    return LLM(model=str(model_dir), dtype="float32", max_model_len=128, **settings)


def test_a_bf16_cache_holds_twice_the_blocks_in_the_same_memory(tiny_model_dir: Path) -> None:
    per_block = kv_cache_bytes_per_block(read_model_config(tiny_model_dir), 16, torch.float32)
    memory = 24 * per_block
    float32 = make_llm(tiny_model_dir, kv_cache_memory=memory, kv_cache_dtype="float32")
    bfloat16 = make_llm(tiny_model_dir, kv_cache_memory=memory, kv_cache_dtype="bfloat16")
    assert float32.engine.num_kv_blocks == 24
    assert bfloat16.engine.num_kv_blocks == 48
    k_cache, v_cache = bfloat16.engine.runner.kv_caches[0]
    assert k_cache.dtype == v_cache.dtype == torch.bfloat16 and k_cache.shape[0] == 48
    # Blocks of a bf16 cache hold other K/V: their hashes descend from another root.
    assert bfloat16.engine.root_hash != float32.engine.root_hash


def test_an_int8_cache_holds_its_rows_and_scales_in_the_same_memory(tiny_model_dir: Path) -> None:
    config = read_model_config(tiny_model_dir)
    per_block = kv_cache_bytes_per_block(config, 16, torch.float32)
    int8_per_block = kv_cache_bytes_per_block(config, 16, torch.int8)
    assert int8_per_block * 4 * config.head_dim == per_block * (config.head_dim + 4)
    int8 = make_llm(tiny_model_dir, kv_cache_memory=24 * per_block, kv_cache_dtype="int8")
    assert int8.engine.num_kv_blocks == 24 * per_block // int8_per_block
    k_cache, v_cache = int8.engine.runner.kv_caches[0]
    assert k_cache.dtype == v_cache.dtype == torch.int8
    assert k_cache.shape[-1] == config.head_dim + 4  # each row's float32 scale after it
    engine = int8.engine
    root_name = hash_root_name(engine.model_path, engine.dtype, engine.runner.kv_cache_dtype)
    assert "kv=torch.int8" in root_name


@pytest.mark.usefixtures("restore_cpu_kernels")
@pytest.mark.parametrize("kernels_on", [True, False], ids=["cpu-kernels", "pure-torch"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "int8"])
def test_an_engine_with_a_narrow_cache_generates_and_frees_every_block(
    tiny_model_dir: Path, kernels_on: bool, kv_dtype: str
) -> None:
    llm = make_llm(
        tiny_model_dir, num_kv_blocks=32, kv_cache_dtype=kv_dtype, cpu_kernels=kernels_on
    )
    prompts = [[5, 6, 7] * (i + 1) for i in range(6)]  # a shared prefix, several lengths
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    assert [len(o.token_ids) for o in outputs] == [20] * 6
    assert llm.engine.stats().num_free_kv_blocks == 32


@pytest.mark.timeout(600)
def test_tensor_parallel_ranks_with_bf16_caches_match_one_rank_under_pressure(
    tiny_model_dir: Path,
) -> None:
    # Each rank stores its own KV heads in bf16; with prompts chunked, a prefix shared, and a
    # pool small enough to preempt, two ranks give one rank's greedy tokens and free every block.
    pressure: dict[str, Any] = dict(
        num_kv_blocks=12, max_num_batched_tokens=16, kv_cache_dtype="bfloat16"
    )
    shared = list(range(10, 50))
    prompts = [[*shared, 5, 6, 7], [*shared, 8, 9], list(range(60, 95)), list(range(100, 112))]
    greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    expected = [
        o.token_ids
        for o in make_llm(tiny_model_dir, **pressure).generate(prompts, greedy, use_tqdm=False)
    ]
    tp2 = make_llm(tiny_model_dir, tensor_parallel_size=2, **pressure)
    try:
        assert [o.token_ids for o in tp2.generate(prompts, greedy, use_tqdm=False)] == expected
        stats = tp2.stats()
        assert stats.num_preemptions > 0 and stats.prefix_cache_hits > 0
        assert tp2.engine.stats().num_free_kv_blocks == 12
    finally:
        tp2.shutdown()
