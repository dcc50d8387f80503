"""The `tokenizers` pipeline a GGUF describes: llama.cpp stores no tokenizer.json, only a
vocabulary, merges, token types, special ids and a pre-tokenizer name; these rebuild the
equivalent byte-level BPE (Tokenizer.from_gguf puts them together).

Token ids must equal transformers' for the same model, so each pre-tokenizer mirrors the one of
the model's original tokenizer.json. Torch-free.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as BackendTokenizer

from pagedock.errors import ModelLoadError

logger = logging.getLogger(__name__)

# llama.cpp's token types (tokenizer.ggml.token_type).
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

# How text is split before BPE, by llama.cpp's `tokenizer.ggml.pre` name. Each mirrors the
# pre-tokenizer of the model's original tokenizer.json.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # SmolLM2 / StarCoder: every digit is its own pre-token, then GPT-2's split.
    digits = pre_tokenizers.Digits(individual_digits=True)
    return pre_tokenizers.Sequence([digits, _gpt2_pre_tokenizer()])


def _regex_then_bytes(pattern: str) -> pre_tokenizers.PreTokenizer:
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return pre_tokenizers.Sequence([split, byte_level])


_PRE_TOKENIZERS = {
    "default": _gpt2_pre_tokenizer,
    "gpt2": _gpt2_pre_tokenizer,
    "gpt-2": _gpt2_pre_tokenizer,
    "smollm": _digits_then_gpt2,
    "starcoder": _digits_then_gpt2,
    "llama-bpe": lambda: _regex_then_bytes(_LLAMA3_SPLIT),
    "llama3": lambda: _regex_then_bytes(_LLAMA3_SPLIT),
    "qwen2": lambda: _regex_then_bytes(_QWEN2_SPLIT),
}


@cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: each byte as a printable character (for vocabulary spelling)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shifted)
            shifted += 1
    return mapping


def byte_level_bpe(tokens: list[str], merges: list[str], file: Path) -> BackendTokenizer:
    alphabet = set(_byte_to_unicode().values())
    spelling = _byte_to_unicode()

    def spelled(token: str) -> str:
        # A byte-level vocabulary writes every token in the byte alphabet; a token outside it
        # (seen in some converted files) is respelled so it can still be produced and decoded.
        if set(token) <= alphabet:
            return token
        return "".join(spelling[b] for b in token.encode("utf-8"))

    vocab = {spelled(token): i for i, token in enumerate(tokens)}
    pairs = []
    for merge in merges:
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ModelLoadError(f"{file}: malformed BPE merge {merge!r} in tokenizer.ggml.merges")
        pairs.append((parts[0], parts[1]))
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    backend.decoder = decoders.ByteLevel()
    return backend


def gguf_pre_tokenizer(pre: str | None, file: Path) -> pre_tokenizers.PreTokenizer:
    make = _PRE_TOKENIZERS.get(pre or "default")
    if make is None:
        logger.warning(
            "%s: unknown pre-tokenizer %r (tokenizer.ggml.pre); splitting text as GPT-2 does, "
            "token ids may differ from the model's own tokenizer",
            file,
            pre,
        )
        make = _gpt2_pre_tokenizer
    return make()


def add_gguf_added_tokens(backend: BackendTokenizer, tokens: list[str], types: list[int]) -> None:
    """Register control tokens as special and user-defined ones as plain added tokens, so that
    their text in a prompt maps to the one token rather than being split by BPE."""
    control = [tokens[i] for i, kind in enumerate(types) if kind == _TOKEN_TYPE_CONTROL]
    user = [tokens[i] for i, kind in enumerate(types) if kind == _TOKEN_TYPE_USER_DEFINED]
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])


def special_token_template(
    bos: str | None, eos: str | None, backend: BackendTokenizer
) -> processors.PostProcessor | None:
    """The post-processor that adds BOS / EOS around a sequence, when the model wants them."""
    if bos is None and eos is None:
        return None
    single = " ".join([*([bos] if bos else []), "$A", *([eos] if eos else [])])
    pair = " ".join([single, "$B:1", *([eos] if eos else [])])
    specials = [(t, backend.token_to_id(t)) for t in (bos, eos) if t is not None]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
