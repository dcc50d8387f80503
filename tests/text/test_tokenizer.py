"""The tokenizer gives transformers' ids for the same model, from a GGUF or an HF directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pagedock.errors import ModelLoadError
from pagedock.text.tokenizer import Tokenizer, load_tokenizer
from tests.text.factories import tiny_llama_weights, write_tiny_gguf

SAMPLES = {
    "plain": "The quick brown fox jumps over the lazy dog.",
    "code": 'def f(x: int) -> int:\n    """Square."""\n    return x ** 2  # 42\n\n\tpass\n',
    "chinese": "你好，世界！今天天气很好。我们去公园散步吧。",
    "emoji": "emoji 🤖🎉 family 👨‍👩‍👧 flag 🇫🇷 ok",
    "whitespace": "   leading\n\n\n  runs   of    spaces\t\t and trailing   ",
    "specials": "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><repo_name>x",
    "numbers": "pi 3.14159, year 2024, 1e-9 and 1234567890",
    "accents": "naïve café Ωmega Straße",
    "scripts": "العربية हिन्दी русский 日本語のテキスト 한국어",
    "invisible": "\u00a0nbsp\u200bzero\u2028sep",
    "empty": "",
    "space": " ",
}


@pytest.mark.parametrize("text", SAMPLES.values(), ids=SAMPLES.keys())
def test_ids_equal_transformers(
    smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer: Any, text: str
) -> None:
    for add_special_tokens in (True, False):
        ours = smollm2_tokenizer.encode(text, add_special_tokens=add_special_tokens)
        assert ours == smollm2_hf_tokenizer.encode(text, add_special_tokens=add_special_tokens)


@pytest.mark.parametrize("text", SAMPLES.values(), ids=SAMPLES.keys())
def test_decode_equals_transformers(
    smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer: Any, text: str
) -> None:
    ids = smollm2_hf_tokenizer.encode(text)
    for skip in (True, False):
        expected = smollm2_hf_tokenizer.decode(ids, skip_special_tokens=skip)
        assert smollm2_tokenizer.decode(ids, skip_special_tokens=skip) == expected


def test_decode_round_trips_text(smollm2_tokenizer: Tokenizer) -> None:
    for text in SAMPLES.values():
        ids = smollm2_tokenizer.encode(text)
        assert smollm2_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_tokens_and_special_ids_equal_transformers(
    smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer: Any
) -> None:
    ids = smollm2_hf_tokenizer.encode(SAMPLES["code"] + SAMPLES["specials"])
    assert smollm2_tokenizer.convert_ids_to_tokens(
        ids
    ) == smollm2_hf_tokenizer.convert_ids_to_tokens(ids)
    assert smollm2_tokenizer.vocab_size == len(smollm2_hf_tokenizer) == 49152
    assert smollm2_tokenizer.bos_token_id == smollm2_hf_tokenizer.bos_token_id == 1
    assert smollm2_tokenizer.eos_token_id == smollm2_hf_tokenizer.eos_token_id == 2
    assert set(smollm2_hf_tokenizer.all_special_ids) <= set(smollm2_tokenizer.all_special_ids)
    # The 17 control tokens (<|endoftext|>, <|im_start|>, ..., <empty_output>) are all special.
    assert smollm2_tokenizer.all_special_ids == list(range(17))


def test_eos_set_holds_the_templates_end_of_turn_token(smollm2_tokenizer: Tokenizer) -> None:
    # <|im_end|> ends a turn in SmolLM2's template and is its eos.
    assert smollm2_tokenizer.eos_token_ids == {2}


def test_hf_directory_tokenizer_equals_gguf_tokenizer(
    smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer: Any, tmp_path: Path
) -> None:
    smollm2_hf_tokenizer.save_pretrained(tmp_path)
    from_dir = Tokenizer.from_hf_dir(tmp_path)
    for text in SAMPLES.values():
        assert from_dir.encode(text) == smollm2_tokenizer.encode(text)
    assert from_dir.chat_template == smollm2_tokenizer.chat_template
    assert (from_dir.bos_token_id, from_dir.eos_token_ids) == (1, {2})


def test_hf_directory_reads_generation_config_eos_ids(
    smollm2_hf_tokenizer: Any, tmp_path: Path
) -> None:
    smollm2_hf_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [2, 0]}')
    assert Tokenizer.from_hf_dir(tmp_path).eos_token_ids == {0, 2}


def test_hf_directory_without_tokenizer_json_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"tokenizer\.json: no tokenizer\.json"):
        Tokenizer.from_hf_dir(tmp_path)


def test_gguf_with_a_non_bpe_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "spm.gguf", tiny_llama_weights(), tokenizer_model="llama")
    with pytest.raises(
        ModelLoadError, match=r"spm\.gguf: unsupported GGUF tokenizer model 'llama'"
    ):
        Tokenizer.from_gguf(path)


def test_tiny_gguf_tokenizer_applies_its_merges(tmp_path: Path) -> None:
    tokenizer = Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "t.gguf", tiny_llama_weights()))
    assert tokenizer.encode("abab<|endoftext|>a") == [3, 3, 0, 1]
    assert tokenizer.decode([3, 0, 1]) == "aba"


def test_load_tokenizer_reads_a_ggufs_own_tokenizer(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(write_tiny_gguf(tmp_path / "t.gguf", tiny_llama_weights()))
    assert tokenizer is not None and tokenizer.encode("abab") == [3, 3]


def test_load_tokenizer_reads_an_hf_directorys_tokenizer_json(tmp_path: Path) -> None:
    from tests.tiny_model import TINY_VOCAB, save_tiny_tokenizer

    save_tiny_tokenizer(tmp_path, TINY_VOCAB)
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer is not None
    text = "Paged attention keeps KV memory in fixed-size blocks."
    assert tokenizer.encode(text) == Tokenizer.from_hf_dir(tmp_path).encode(text)


def test_load_tokenizer_gives_none_for_a_checkpoint_without_one(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert load_tokenizer(tmp_path) is None
