"""The model's tokenizer, built on the `tokenizers` library (Rust, fast), from a GGUF or an HF dir.

A GGUF carries no tokenizer.json, only llama.cpp's description of one (vocabulary, merges, token
types, special ids, a pre-tokenizer name); `from_gguf` rebuilds the equivalent `tokenizers`
pipeline (gguf_tokenizer.py). Token ids must equal transformers' for the same model: the router
hashes prompt blocks from these ids and the engine caches KV under the same hashes.

Torch-free: the router imports this.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer

from pagedock.errors import InvalidRequestError, ModelLoadError
from pagedock.text.chat_template import ChatTemplate
from pagedock.text.gguf_tokenizer import (
    add_gguf_added_tokens,
    byte_level_bpe,
    gguf_pre_tokenizer,
    special_token_template,
)

# Markers with which chat templates end a turn. When a template writes one, generating it ends
# the answer, even where the file names a different eos token.
END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|return|>",
    "<|END_OF_TURN_TOKEN|>",
)


class Tokenizer:
    """Text <-> token ids, special tokens and the chat template of one model."""

    def __init__(
        self,
        backend: BackendTokenizer,
        special_tokens: Mapping[str, str | None],
        chat_template: str | None = None,
        extra_eos_token_ids: Iterable[int] = (),
        name: str = "model",
    ) -> None:
        """`special_tokens` maps `bos_token` / `eos_token` / `unk_token` / `pad_token` to text."""
        self._backend = backend
        self.name = name
        self.special_tokens = dict(special_tokens)
        self.bos_token_id = self.token_to_id(self.special_tokens.get("bos_token"))
        self.eos_token_id = self.token_to_id(self.special_tokens.get("eos_token"))
        self._extra_eos_token_ids = tuple(extra_eos_token_ids)
        self.use_chat_template(chat_template)

    def use_chat_template(self, chat_template: str | None) -> None:
        """Render chats with `chat_template` (`--chat-template`, or one pagedock ships).

        The end-of-turn tokens the template writes end generation, so they follow it."""
        self.chat_template = chat_template
        self._template = ChatTemplate(chat_template, self.special_tokens) if chat_template else None
        self.eos_token_ids = frozenset(self._end_of_generation_ids(self._extra_eos_token_ids))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Rebuild the tokenizer a GGUF file describes (byte-level BPE: `tokenizer.ggml.model`
        is `gpt2`); ModelLoadError for other tokenizer models."""
        from pagedock.models.gguf_reader import open_gguf

        file = Path(path).expanduser().resolve()
        metadata = open_gguf(file).metadata

        def meta(key: str, default: Any = None) -> Any:
            return metadata.get(f"tokenizer.{key}", default)

        kind = meta("ggml.model")
        if kind is None:
            raise ModelLoadError(f"{file}: the GGUF holds no tokenizer (no tokenizer.ggml.model)")
        if kind != "gpt2":
            raise ModelLoadError(
                f"{file}: unsupported GGUF tokenizer model {kind!r} (tokenizer.ggml.model); "
                "pagedock rebuilds byte-level BPE ('gpt2') tokenizers from GGUF. For other "
                "tokenizers serve the model as an HF directory with tokenizer.json"
            )
        tokens: list[str] = meta("ggml.tokens") or []
        merges: list[str] = meta("ggml.merges") or []
        if not tokens or not merges:
            raise ModelLoadError(f"{file}: GGUF metadata lacks tokenizer.ggml.tokens or .merges")
        backend = byte_level_bpe(tokens, merges, file)
        backend.pre_tokenizer = gguf_pre_tokenizer(meta("ggml.pre"), file)
        add_gguf_added_tokens(backend, tokens, meta("ggml.token_type") or [])

        special = {
            f"{name}_token": None if (i := meta(f"ggml.{key}_token_id")) is None else tokens[i]
            for name, key in (
                ("bos", "bos"),
                ("eos", "eos"),
                ("unk", "unknown"),
                ("pad", "padding"),
            )
        }
        backend.post_processor = special_token_template(
            special["bos_token"] if meta("ggml.add_bos_token", False) else None,
            special["eos_token"] if meta("ggml.add_eos_token", False) else None,
            backend,
        )
        extra_eos = [meta(f"ggml.{k}_token_id") for k in ("eot", "eom")]
        return cls(
            backend,
            special,
            chat_template=meta("chat_template"),
            extra_eos_token_ids=[int(i) for i in extra_eos if i is not None],
            name=file.name,
        )

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load `tokenizer.json`, with special tokens and chat template from the files beside it."""
        directory = Path(path).expanduser().resolve()
        tokenizer_file = directory / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ModelLoadError(f"{tokenizer_file}: no tokenizer.json in the model directory")
        try:
            backend = BackendTokenizer.from_file(str(tokenizer_file))
        except Exception as e:  # the Rust side raises a bare Exception on malformed JSON
            raise ModelLoadError(f"{tokenizer_file}: cannot load the tokenizer ({e})") from e
        config = _read_json(directory / "tokenizer_config.json")
        special = {
            f"{name}_token": _token_text(config.get(f"{name}_token"))
            for name in ("bos", "eos", "unk", "pad")
        }
        generation = _read_json(directory / "generation_config.json")
        eos = generation.get("eos_token_id")
        extra_eos = eos if isinstance(eos, list) else ([] if eos is None else [eos])
        return cls(
            backend,
            special,
            chat_template=_hf_chat_template(directory, config),
            extra_eos_token_ids=[int(i) for i in extra_eos],
            name=directory.name,
        )

    # -- text <-> ids ------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`. Special-token text in it (e.g. `<|im_end|>`) becomes that token;
        `add_special_tokens` adds what the model adds on its own (e.g. BOS)."""
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of `token_ids`; invalid UTF-8 (a partial character) becomes U+FFFD."""
        return self._backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, token_ids: Sequence[int]) -> list[str | None]:
        """The vocabulary strings of `token_ids` (None for an id outside the vocabulary)."""
        return [self._backend.id_to_token(int(i)) for i in token_ids]

    def vocabulary(self) -> list[str]:
        """Every vocabulary string (byte-level spelling), indexed by token id; what grammar
        engines build their token tries from."""
        by_id = self._backend.get_vocab(with_added_tokens=True)
        vocab = [""] * (max(by_id.values()) + 1)
        for token, token_id in by_id.items():
            vocab[token_id] = token
        return vocab

    def to_json(self) -> str:
        """The tokenizer as `tokenizer.json` text (what llguidance reads)."""
        return self._backend.to_str()

    def token_to_id(self, token: str | None) -> int | None:
        """The id of vocabulary string `token`, or None."""
        return None if token is None else self._backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def all_special_ids(self) -> list[int]:
        """Ids of every special token (control tokens and bos/eos/unk/pad), sorted."""
        ids = {i for i, t in self._backend.get_added_tokens_decoder().items() if t.special}
        named = (self.token_to_id(t) for t in self.special_tokens.values())
        ids.update(i for i in named if i is not None)
        return sorted(ids)

    # -- chat --------------------------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **template_kwargs: Any,
    ) -> str | list[int]:
        """Render `messages` with the model's template; the prompt text, or its ids if `tokenize`.

        The template writes any BOS itself, so tokenizing adds no special tokens (as HF does).
        """
        if self._template is None:
            raise InvalidRequestError(
                f"{self.name} has no chat template, so it cannot serve chat requests; send a raw "
                "prompt to /v1/completions instead",
                param="messages",
            )
        text = self._template.render(messages, add_generation_prompt, **template_kwargs)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _end_of_generation_ids(self, extra_ids: Iterable[int]) -> set[int]:
        ids = {i for i in (self.eos_token_id, *extra_ids) if i is not None}
        special = {
            t.content for t in self._backend.get_added_tokens_decoder().values() if t.special
        }
        for marker in END_OF_TURN_TOKENS:
            marker_id = self._backend.token_to_id(marker)
            used = self.chat_template is not None and marker in self.chat_template
            if used and marker in special and marker_id is not None:
                ids.add(marker_id)
        return ids


def load_tokenizer(
    path: str | os.PathLike[str], chat_template: str | None = None
) -> Tokenizer | None:
    """The tokenizer of a resolved model (registry.resolve_model's path), found the one way the
    engine and the router both use: the GGUF's own, or the HF directory's tokenizer.json; None
    for a bare checkpoint (such a model takes token ids only). `chat_template` (chat_template.py's
    chat_template_source) replaces the model's own template."""
    path = Path(path)
    tokenizer = None
    if path.suffix == ".gguf":
        tokenizer = Tokenizer.from_gguf(path)
    elif (path / "tokenizer.json").exists():
        tokenizer = Tokenizer.from_hf_dir(path)
    if tokenizer is not None and chat_template is not None:
        tokenizer.use_chat_template(chat_template)
    return tokenizer


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{file}: not valid JSON ({e})") from e
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _hf_chat_template(directory: Path, config: Mapping[str, Any]) -> str | None:
    """The default chat template: in tokenizer_config.json, else chat_template.jinja / .json."""
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if isinstance(template, str):
        return template
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = _read_json(directory / "chat_template.json").get("chat_template")
    return template if isinstance(template, str) else None
