"""LoRA on the built-in model: three PEFT adapters of SmolLM2-135M-Instruct (made by peft on
transformers' copy of the same GGUF) served beside the base model in the same steps give
transformers + PEFT's greedy tokens, with chunked prefill, preemption and prefix-cache hits."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import LLM, SamplingParams
from engine.inputs.engine_request import AdapterRef
from tests.engine.conftest import hf_greedy

pytestmark = pytest.mark.slow

NUM_NEW_TOKENS = 24
GREEDY = SamplingParams(max_tokens=NUM_NEW_TOKENS, temperature=0.0, ignore_eos=True)
# Ranks and targets as fine-tunes use them: attention only, every projection, the MLP only.
ADAPTERS: dict[str, dict[str, Any]] = {
    "support": dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
    "sql": dict(
        r=16,
        lora_alpha=32,
        target_modules=[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
    ),
    "poems": dict(r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj", "down_proj"]),
}
KINDS: list[str | None] = [None, "support", "sql", "poems"]  # None: the base model
# Small enough that the answers stay text-like, large enough that each adapter changes them.
LORA_STD = 0.05
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Paged attention stores the key-value cache in",
    "SELECT name, email FROM users WHERE",
    "Write a short poem about the autumn wind and the falling leaves:",
    "The three laws of thermodynamics are",
    "In 1969, the first humans to walk on the Moon were",
]

Expected = Callable[[str | None, list[int]], list[int]]


def load_hf_smollm2(gguf: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="module")
def hf_base(smollm2_gguf_path: Path) -> Any:
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF")
    return load_hf_smollm2(smollm2_gguf_path)


@pytest.fixture(scope="module")
def adapter_dirs(hf_base: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random adapters, made and saved by peft itself (B is random too: peft starts it at 0)."""
    import torch
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("smollm2-adapters")
    for seed, (name, spec) in enumerate(ADAPTERS.items()):
        config = LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **spec)
        model = get_peft_model(copy.deepcopy(hf_base), config)
        generator = torch.Generator().manual_seed(100 + seed)
        with torch.no_grad():
            for param_name, param in model.named_parameters():
                if "lora_" in param_name:
                    param.copy_(torch.randn(param.shape, generator=generator) * LORA_STD)
        model.save_pretrained(str(root / name))
    return {name: root / name for name in ADAPTERS}


@pytest.fixture(scope="module")
def expected(hf_base: Any, adapter_dirs: dict[str, Path]) -> Expected:
    """transformers + PEFT's greedy tokens of a prompt under an adapter (None: the base)."""
    from peft import PeftModel

    names = list(adapter_dirs)
    peft = PeftModel.from_pretrained(
        copy.deepcopy(hf_base), adapter_dirs[names[0]], adapter_name=names[0]
    )
    for name in names[1:]:
        peft.load_adapter(adapter_dirs[name], adapter_name=name)
    peft.eval()
    cache: dict[tuple[str | None, tuple[int, ...]], list[int]] = {}

    def tokens(adapter: str | None, prompt: list[int]) -> list[int]:
        key = (adapter, tuple(prompt))
        if key not in cache:
            if adapter is None:
                cache[key] = hf_greedy(hf_base, prompt, NUM_NEW_TOKENS)
            else:
                peft.set_adapter(adapter)
                cache[key] = hf_greedy(peft, prompt, NUM_NEW_TOKENS)
        return cache[key]

    return tokens


def test_smollm2_adapters_in_mixed_steps_match_peft(
    smollm2_gguf_path: Path,
    adapter_dirs: dict[str, Path],
    expected: Expected,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 32 tokens a step: prompts are prefilled in chunks beside the others' decodes; 8 sequences
    # of up to ~45 tokens need ~24 blocks of 16, so 14 force preemption by recompute.
    llm = LLM(
        model=str(smollm2_gguf_path),
        dtype="float32",
        max_model_len=128,
        num_kv_blocks=14,
        block_size=16,
        max_num_batched_tokens=32,
        enable_lora=True,
        lora_modules=[f"{name}={path}" for name, path in adapter_dirs.items()],
    )
    tokenizer = llm.engine.tokenizer
    assert tokenizer is not None
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    adapters = [KINDS[i % 4] for i in range(len(prompts))]
    steps: list[set[str | None]] = []
    forward = llm.engine.runner.forward

    def recording(batch: Any) -> Any:
        steps.append({s.lora_name for s in batch})
        return forward(batch)

    monkeypatch.setattr(llm.engine.runner, "forward", recording)
    want = [expected(a, p) for p, a in zip(prompts, adapters, strict=True)]
    refs = [None if a is None else AdapterRef(a) for a in adapters]

    outputs = llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=refs)
    assert [o.token_ids for o in outputs] == want
    assert any(step == set(KINDS) for step in steps), "no step held three adapters and base"
    assert llm.stats().num_preemptions > 0
    for prompt, adapter, tokens in zip(prompts, adapters, want, strict=True):
        assert adapter is None or tokens != expected(None, prompt), adapter

    # The same prompts again, two at a time: their first blocks are found in the cache, each
    # under its own adapter only (a hit across adapters would change the tokens).
    hits = llm.stats().prefix_cache_hits
    for start in range(0, len(prompts), 2):
        pair = slice(start, start + 2)
        again = llm.generate(prompts[pair], GREEDY, use_tqdm=False, lora_request=refs[pair])
        assert [o.token_ids for o in again] == want[pair]
    assert llm.stats().prefix_cache_hits > hits
    assert llm.stats().num_free_kv_blocks == 14
