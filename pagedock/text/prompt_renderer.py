"""The one way a request's prompt becomes token ids, for the engine's server, `LLM.chat` and the
router: the router hashes the blocks of these ids and the engine caches KV under the same hashes,
so both must get them from the same code, not from two copies kept in step.

    chat:        request.template_messages() and .template_tools() -> the model's chat template
                 -> encode, no specials
    completions: text -> encode with specials (BOS...); token ids -> as given; a batch -> each

Input the tokenizer cannot take (lone surrogates from JSON escapes, say) is the client's error:
InvalidRequestError, a 400. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from pagedock.errors import InvalidRequestError
from pagedock.protocol.chat import Conversation, unsupported_message_field
from pagedock.protocol.prompt_input import PromptInput
from pagedock.protocol.tools import check_tools

if TYPE_CHECKING:
    from pagedock.text.tokenizer import Tokenizer

# What the Rust tokenizer (or the template's output) raises for input it cannot take.
_TOKENIZER_ERRORS = (UnicodeError, TypeError, OverflowError)


@dataclass
class Prompt:
    """One prompt of a request: its token ids, and its text when it has one (echo, logs)."""

    token_ids: list[int]
    text: str | None = None


class ChatInput(Protocol):
    """What a chat prompt is rendered from: ChatCompletionRequest, TokenizeRequest, Conversation."""

    @property
    def add_generation_prompt(self) -> bool: ...

    def template_messages(self) -> list[dict[str, Any]]: ...

    def template_tools(self) -> list[dict[str, Any]] | None: ...


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
    except _TOKENIZER_ERRORS as e:
        raise InvalidRequestError(f"cannot tokenize {param}: {e}", param) from e


def render_chat(tokenizer: Tokenizer | None, request: ChatInput) -> Prompt:
    """The chat template applied to the request's messages: prompt text and its token ids."""
    tok = require_tokenizer(tokenizer, "messages")
    messages = request.template_messages()
    tools = request.template_tools()
    try:
        text = tok.apply_chat_template(
            messages, request.add_generation_prompt, tokenize=False, tools=tools
        )
    except _TOKENIZER_ERRORS as e:
        raise InvalidRequestError(f"cannot render the messages: {e}", "messages") from e
    assert isinstance(text, str)
    # The template writes BOS itself when the model wants one, so nothing more is added.
    return Prompt(encode_text(tok, text, "messages", add_special_tokens=False), text)


def read_conversation(
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
) -> Conversation:
    """Plain-dict messages and tools (the offline API's) read as the HTTP API reads them; 400 if
    invalid."""
    if tools:
        check_tools(tools)
    try:
        conv = Conversation.model_validate(
            {"messages": messages, "add_generation_prompt": add_generation_prompt, "tools": tools}
        )
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequestError(f"invalid {where}: {first['msg']}", "messages") from e
    unsupported = unsupported_message_field(conv.messages)
    if unsupported is not None:
        raise InvalidRequestError(f"`{unsupported}` is not supported by pagedock", unsupported)
    conv.template_messages()  # tool calls and tool results checked, as the server checks them
    return conv


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
