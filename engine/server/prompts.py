"""Turning request input into token ids, on the event loop (the engine thread only computes).

Tokenizing here keeps the engine thread's steps free of it; encoding even a long prompt takes
around a millisecond in the Rust tokenizer. Input the tokenizer cannot take (lone surrogates from
JSON escapes, say) is the client's error, a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.errors import InvalidRequestError
from engine.protocol import PromptInput
from engine.server.generation import Prompt

if TYPE_CHECKING:
    from engine.text.tokenizer import Tokenizer


def require_tokenizer(tokenizer: Tokenizer | None, param: str) -> Tokenizer:
    if tokenizer is None:
        raise InvalidRequestError("this model has no tokenizer: send token ids", param)
    return tokenizer


def encode_text(
    tokenizer: Tokenizer | None, text: str, param: str, add_special_tokens: bool = True
) -> list[int]:
    tok = require_tokenizer(tokenizer, param)
    try:
        return tok.encode(text, add_special_tokens=add_special_tokens)
    except (UnicodeError, TypeError, OverflowError) as e:
        raise InvalidRequestError(f"cannot tokenize {param}: {e}", param) from e


def render_chat(
    tokenizer: Tokenizer | None, messages: list[dict[str, str]], add_generation_prompt: bool
) -> Prompt:
    """The chat template applied to `messages`: prompt text and its token ids."""
    tok = require_tokenizer(tokenizer, "messages")
    try:
        text = tok.apply_chat_template(messages, add_generation_prompt, tokenize=False)
    except (UnicodeError, TypeError, OverflowError) as e:
        raise InvalidRequestError(f"cannot render the messages: {e}", "messages") from e
    assert isinstance(text, str)
    # The template writes BOS itself when the model wants one, so nothing more is added.
    return Prompt(encode_text(tok, text, "messages", add_special_tokens=False), text)


def completion_prompts(tokenizer: Tokenizer | None, prompt: PromptInput) -> list[Prompt]:
    """A completions `prompt` (text, ids, or a batch of either) as one Prompt per entry."""
    if isinstance(prompt, str):
        return [Prompt(encode_text(tokenizer, prompt, "prompt"), prompt)]
    if not prompt:
        raise InvalidRequestError("the prompt is empty", "prompt")
    if all(isinstance(p, int) for p in prompt):
        return [Prompt(list(prompt), _decode_or_none(tokenizer, prompt))]  # type: ignore[arg-type]
    prompts = []
    for entry in prompt:
        if isinstance(entry, str):
            prompts.append(Prompt(encode_text(tokenizer, entry, "prompt"), entry))
        elif isinstance(entry, list):
            prompts.append(Prompt(list(entry), _decode_or_none(tokenizer, entry)))
    return prompts


def _decode_or_none(tokenizer: Tokenizer | None, token_ids: Sequence[int]) -> str | None:
    """The text of a token-id prompt (for echo and the debug log); None when it can't be read."""
    if tokenizer is None or not token_ids:
        return None
    try:
        return tokenizer.decode(token_ids, skip_special_tokens=False)
    except (OverflowError, TypeError, ValueError):
        return None  # ids outside the vocabulary: the engine answers with a 400
