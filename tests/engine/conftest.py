"""Factories for the engine tests: a tiny random-weight llama saved as a normal HF directory."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_model import TINY_VOCAB, make_tiny_llama_dir


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def hf_tiny_model(tiny_model_dir: Path) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def make_prompts(count: int, min_len: int, max_len: int, seed: int = 0) -> list[list[int]]:
    """Seeded random token-id prompts; ids avoid 0-2 (pad/bos/eos) so nothing stops early."""
    rng = random.Random(seed)
    return [
        [rng.randrange(3, TINY_VOCAB) for _ in range(rng.randint(min_len, max_len))]
        for _ in range(count)
    ]


def hf_greedy(hf_model: Any, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' model, one prompt alone (no padding), plain argmax with its own KV cache and
    no logits processors (generate's min_new_tokens would mask EOS, which ignore_eos does not)."""
    import torch

    tokens: list[int] = []
    with torch.no_grad():
        out = hf_model(torch.tensor([prompt]), use_cache=True)
        for _ in range(max_new_tokens):
            next_id = int(out.logits[0, -1].argmax())
            tokens.append(next_id)
            out = hf_model(
                torch.tensor([[next_id]]), past_key_values=out.past_key_values, use_cache=True
            )
    return tokens


def prefill_logits(llm: Any, prompt: list[int]) -> Any:
    """pagedock's logits at every position of a fresh prompt (one prefill, no sampling)."""
    import torch

    from engine.core.scheduler_output import ScheduledRequest
    from engine.inputs.sampling_params import SamplingParams
    from engine.worker.input_batch import build_model_inputs

    engine = llm.engine
    num_blocks = -(-len(prompt) // engine.config.block_size)
    item = ScheduledRequest(
        "logits", prompt, 0, list(range(num_blocks)), True, SamplingParams(), prompt, []
    )
    inputs = build_model_inputs([item], engine.config.block_size, torch.device("cpu"))
    with torch.inference_mode():
        return engine.model(
            inputs.input_ids,
            inputs.positions,
            engine.runner.kv_caches,
            inputs.meta,
            torch.arange(len(prompt)),
        )
