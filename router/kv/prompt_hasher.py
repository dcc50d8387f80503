"""PromptHasher: a request's prompt token ids, from the engine's own renderer, and the hashes of
their full blocks under a replica's root hash.

The token ids come from pagedock/text/prompt_renderer.py, the code the engine's server runs, with
the tokenizer the engine loads (pagedock/text/tokenizer.py's load_tokenizer, from the same model
source, tokenizer files only), so the router's hashes equal the engine's cache keys by
construction. What is the router's own: hashes cached per (root, block size), and a request the
renderer rejects is hashed as nothing rather than answered (the engine answers the client).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pagedock.errors import ModelLoadError, PagedockError
from pagedock.kv.block_hash import BlockHash, hash_blocks, request_root
from pagedock.models.hub import HF_SCHEME
from pagedock.models.registry import resolve_model
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.protocol.response_chat import chat_request
from pagedock.protocol.response_items import read_input_items
from pagedock.protocol.responses import ResponsesRequest
from pagedock.text import tokenizer as engine_tokenizer
from pagedock.text.chat_template import chat_template_source
from pagedock.text.prompt_renderer import completion_prompts, render_chat
from pagedock.text.tokenizer import Tokenizer

logger = logging.getLogger("pagedock.router")
# The renderer raises InvalidRequestError (a PagedockError) for input it rejects; the rest is a
# safety net: a request the router cannot hash must still be routed.
_TOKENIZE_ERRORS = (PagedockError, UnicodeError, TypeError, ValueError, OverflowError)


def load_tokenizer(model: str, chat_template: str | None = None) -> Tokenizer | None:
    """The model's tokenizer, loaded as the engine loads it but without fetching weights, with
    the chat template the engine uses (`chat_template` as the engine's --chat-template).

    None when an hf:// tokenizer cannot be fetched (hub down, gated repo without a token): the
    router then balances by load rather than failing to start.
    """
    try:
        resolved = resolve_model(model, weights=False)
    except ModelLoadError as e:
        if not model.startswith(HF_SCHEME):
            raise
        logger.warning("%s", e)
        return None
    template = chat_template_source(chat_template, resolved.chat_template_file)
    return engine_tokenizer.load_tokenizer(resolved.path, template)


@dataclass
class PromptBlocks:
    """One prompt's token ids and, per (root hash, block size), the hashes of its full blocks."""

    token_ids: list[int]
    num_prompt_tokens: int
    """Tokens of every prompt of the request (a completions batch has several)."""
    cache_salt: str | None = None
    """The request's `cache_salt` as the engine reads it: its chains start from the salted root
    (pagedock/kv/block_hash.py), as the engine's do."""
    _hashes: dict[tuple[bytes, int], list[BlockHash]] = field(default_factory=dict)

    def hashes(self, root: bytes, block_size: int) -> list[BlockHash]:
        """The hashes of its full blocks on the chain a replica's `root` (the model's or an
        adapter's) starts, salted by the request's salt."""
        key = (root, block_size)
        if key not in self._hashes:
            salted = request_root(root, self.cache_salt)
            self._hashes[key] = hash_blocks(self.token_ids, block_size, salted)
        return self._hashes[key]


class PromptHasher:
    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer

    def chat(self, body: ChatCompletionRequest) -> PromptBlocks | None:
        """The request's chat prompt, rendered as the engine renders it."""
        if self.tokenizer is None:
            return None
        try:
            ids = render_chat(self.tokenizer, body).token_ids
        except _TOKENIZE_ERRORS as e:
            logger.debug("cannot tokenize a chat request: %s", e)
            return None
        return PromptBlocks(ids, len(ids), body.cache_salt)

    def response(self, body: ResponsesRequest) -> PromptBlocks | None:
        """A Responses API request's prompt when it starts a conversation (its instructions and
        input as the engine's chat request, rendered as a chat is); None for a follow-up, whose
        history only the engines' store holds (it goes by the replica that produced it)."""
        if self.tokenizer is None or body.previous_response_id is not None:
            return None
        try:
            chat = chat_request(body, read_input_items(body.input))
        except _TOKENIZE_ERRORS as e:
            logger.debug("cannot read a responses request: %s", e)
            return None
        return self.chat(chat)

    def completion(self, body: CompletionRequest) -> PromptBlocks | None:
        """A completions prompt (text, ids, or a batch): the first prompt's blocks, all tokens."""
        try:
            prompts = completion_prompts(self.tokenizer, body.prompt)
        except _TOKENIZE_ERRORS as e:
            logger.debug("cannot tokenize a completions request: %s", e)
            return None
        if not prompts:
            return None
        num_prompt_tokens = sum(len(p.token_ids) for p in prompts)
        return PromptBlocks(prompts[0].token_ids, num_prompt_tokens, body.cache_salt)
