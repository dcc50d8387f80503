"""The built-in model end to end: pagedock on the SmolLM2 GGUF against transformers loading the
same file (fp32), and a real chat answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from tests.engine.conftest import hf_greedy, prefill_logits

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "Paged attention stores the key-value cache in",
]


@pytest.fixture(scope="module")
def llm(smollm2_gguf_path: Path) -> LLM:
    return LLM(model=str(smollm2_gguf_path), dtype="float32", max_model_len=1024)


def test_prefill_logits_match_transformers_on_the_gguf(llm: LLM, smollm2_hf_model: Any) -> None:
    engine = llm.engine
    assert engine.tokenizer is not None
    for prompt in PROMPTS:
        ids = engine.tokenizer.encode(prompt)
        with torch.inference_mode():
            theirs = smollm2_hf_model(torch.tensor([ids])).logits[0].float()
        torch.testing.assert_close(prefill_logits(llm, ids), theirs, atol=2e-3, rtol=1e-4)


def test_greedy_64_tokens_equal_transformers(llm: LLM, smollm2_hf_model: Any) -> None:
    assert llm.engine.tokenizer is not None
    prompts = [llm.engine.tokenizer.encode(p) for p in PROMPTS]
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    ours = [o.token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    theirs = [hf_greedy(smollm2_hf_model, p, 64) for p in prompts]
    assert ours == theirs


def test_chat_answers_the_capital_of_france(llm: LLM) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    out = llm.chat(question, SamplingParams(max_tokens=32, temperature=0.0), use_tqdm=False)[0]
    assert "Paris" in out.text
    assert out.finish_reason == "stop"


def test_stop_strings_end_the_text_before_the_stop_string(llm: LLM) -> None:
    question = [{"role": "user", "content": "Write a short poem about the sea."}]
    full = llm.chat(question, SamplingParams(max_tokens=40, temperature=0.0), use_tqdm=False)[0]
    # Three characters from the middle of the answer: likely to straddle a token boundary.
    stop = full.text[12:15]
    stopped = llm.chat(
        question, SamplingParams(max_tokens=40, temperature=0.0, stop=[stop]), use_tqdm=False
    )[0]
    assert stopped.text == full.text[: full.text.index(stop)]
    assert stopped.finish_reason == "stop" and stopped.outputs[0].stop_reason == stop
