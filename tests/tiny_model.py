"""A tiny random-weight llama saved as a normal HF directory, for tests and benchmarks.

Needs `transformers` (a dev dependency): the model is transformers' own LlamaForCausalLM, so the
engine is checked against an independent implementation of the same weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
