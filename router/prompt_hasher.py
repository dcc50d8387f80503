"""PromptHasher: a request's prompt token ids, exactly as the engine computes them, and the hashes
of their full blocks under a replica's root hash.

The engine's server (engine/server/prompts.py) renders chat messages with the model's chat
template and encodes the text without adding special tokens; a completions prompt is encoded with
them, or taken as token ids as given. The router does the same with the same tokenizer (loaded
from the same model source, tokenizer only), so its hashes equal the engine's cache keys.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.block_hash import BlockHash, hash_blocks
from engine.errors import ModelLoadError, PagedockError
from engine.loader.hub import HF_SCHEME
from engine.loader.registry import resolve_model
from engine.protocol import ChatCompletionRequest, CompletionRequest
from engine.text.tokenizer import Tokenizer

logger = logging.getLogger("pagedock.router")
_TOKENIZE_ERRORS = (PagedockError, UnicodeError, TypeError, ValueError, OverflowError)


def load_tokenizer(model: str) -> Tokenizer | None:
    """The model's tokenizer, found as the engine finds it (GGUF or HF directory).

    None when an hf:// tokenizer cannot be fetched (hub down, gated repo without a token): the
    router then balances by load rather than failing to start.
    """
    try:
        path = resolve_model(model, weights=False).path
    except ModelLoadError as e:
        if not model.startswith(HF_SCHEME):
            raise
        logger.warning("%s", e)
        return None
    if path.suffix == ".gguf":
        return Tokenizer.from_gguf(path)
    if (Path(path) / "tokenizer.json").exists():
        return Tokenizer.from_hf_dir(path)
    return None


@dataclass
class PromptBlocks:
    """One prompt's token ids and, per (root hash, block size), the hashes of its full blocks."""

    token_ids: list[int]
    num_prompt_tokens: int
    """Tokens of every prompt of the request (a completions batch has several)."""
    _hashes: dict[tuple[bytes, int], list[BlockHash]] = field(default_factory=dict)

    def hashes(self, root: bytes, block_size: int) -> list[BlockHash]:
        key = (root, block_size)
        if key not in self._hashes:
            self._hashes[key] = hash_blocks(self.token_ids, block_size, root)
        return self._hashes[key]


class PromptHasher:
    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer

    def chat(self, body: ChatCompletionRequest) -> PromptBlocks | None:
        """The chat template applied to the messages, as engine/server/prompts.render_chat does."""
        if self.tokenizer is None:
            return None
        try:
            text = self.tokenizer.apply_chat_template(body.template_messages(), body.add_generation_prompt, tokenize=False)  # fmt: skip
            ids = self.tokenizer.encode(str(text), add_special_tokens=False)
        except _TOKENIZE_ERRORS as e:  # the engine will answer the client with its own error
            logger.debug("cannot tokenize a chat request: %s", e)
            return None
        return PromptBlocks(ids, len(ids))

    def completion(self, body: CompletionRequest) -> PromptBlocks | None:
        """A completions prompt (text, ids, or a batch): the first prompt's blocks, all tokens."""
        try:
            prompts = [self._prompt_ids(p) for p in _prompt_list(body.prompt)]
        except _TOKENIZE_ERRORS as e:
            logger.debug("cannot tokenize a completions request: %s", e)
            return None
        if not prompts or any(p is None for p in prompts):
            return None
        first = prompts[0]
        assert first is not None
        return PromptBlocks(first, sum(len(p or ()) for p in prompts))

    def _prompt_ids(self, prompt: str | list[int]) -> list[int] | None:
        if isinstance(prompt, list):
            return prompt
        if self.tokenizer is None:
            return None
        return self.tokenizer.encode(prompt)


def _prompt_list(prompt: str | list[str] | list[int] | list[list[int]]) -> list[str | list[int]]:
    """The completions `prompt` as a list of prompts, as engine/server/prompts reads it."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        return []
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]  # type: ignore[arg-type]
    return [p for p in prompt if isinstance(p, str | list)]
