"""Factories for the engine tests: a tiny random-weight llama saved as a normal HF directory."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

TINY_VOCAB = 512


def make_tiny_llama_dir(path: Path, **overrides: Any) -> Path:
    """A 2-layer llama with random weights (transformers' own class), saved with save_pretrained."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fields: dict[str, Any] = dict(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        # Larger than the default 0.02 so logits are well separated: greedy ties between two
        # implementations that differ by float rounding would make token identity flaky.
        initializer_range=0.2,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**fields)).eval()
    model.save_pretrained(path, safe_serialization=True)
    save_tiny_tokenizer(path, int(fields["vocab_size"]))
    return path


_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paged attention keeps KV memory in fixed-size blocks.",
    "def add(a, b):\n    return a + b\n",
    "Continuous batching re-forms the batch at every step.",
    "Prefix caching reuses the blocks of shared prompts.",
] * 20

TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_tiny_tokenizer(path: Path, vocab_size: int) -> None:
    """A byte-level BPE trained on a few sentences; ids 0-2 are pad/bos(im_start)/eos(im_end)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.save_pretrained(path)


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
