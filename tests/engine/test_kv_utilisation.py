"""Paged KV memory holds tokens, not reservations."""

from __future__ import annotations

from pathlib import Path

from engine import LLM, SamplingParams
from tests.engine.conftest import make_prompts


def test_kv_utilisation_on_a_mixed_length_workload_is_at_least_96_percent(
    tiny_model_dir: Path,
) -> None:
    llm = LLM(model=str(tiny_model_dir), num_kv_blocks=2048, max_model_len=1024)
    prompts = make_prompts(24, 32, 400, seed=5)
    llm.generate(prompts, SamplingParams(max_tokens=64, ignore_eos=True), use_tqdm=False)
    stats = llm.stats()
    print(
        f"\nKV utilisation: paged {stats.kv_utilisation:.3f}, "
        f"naive max_model_len reservation {stats.naive_kv_utilisation:.3f}"
    )
    assert stats.kv_utilisation >= 0.96
    assert stats.naive_kv_utilisation < 0.4
