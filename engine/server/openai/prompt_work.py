"""Bounded work before admission: a prompt's text is bounded by its length in characters before it
is tokenized, and rendering/tokenizing runs in the context's small prompt pool, off the event loop,
so a huge prompt neither stalls /health and other requests nor ties up more than a few threads."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from pagedock.errors import PromptTooLongError

if TYPE_CHECKING:
    from engine.server.openai.context import ServerContext
    from pagedock.protocol.prompt_input import PromptInput
    from pagedock.text.prompt_renderer import ChatInput

# NOTE: generous on purpose. A token of our tokenizers covers at least one character, so a text
# of more than max_model_len * this many characters cannot fit the context, whatever its tokens;
# the bound only has to refuse absurd prompts without tokenizing them, never a legal one.
MAX_CHARS_PER_TOKEN = 64

T = TypeVar("T")


def check_prompt_chars(ctx: ServerContext, num_chars: int, param: str) -> None:
    """400 context_length_exceeded, before any tokenizing, for a text too long to possibly fit."""
    max_chars = ctx.max_model_len * MAX_CHARS_PER_TOKEN
    if num_chars > max_chars:
        raise PromptTooLongError(
            f"the prompt has {num_chars} characters, more than a {ctx.max_model_len}-token "
            f"context can hold (at most {max_chars} characters are tokenized)",
            param,
        )


def chat_chars(request: ChatInput) -> int:
    """The summed length of the messages' contents and of the tools' JSON."""
    tools = request.template_tools()
    tools_chars = len(json.dumps(tools)) if tools else 0
    return tools_chars + sum(len(m.get("content") or "") for m in request.template_messages())


def prompt_chars(prompt: PromptInput) -> int:
    """The summed length of a completions prompt's texts (token ids count for nothing here)."""
    if isinstance(prompt, str):
        return len(prompt)
    return sum(len(p) for p in prompt if isinstance(p, str))


async def in_prompt_pool(ctx: ServerContext, fn: Callable[..., T], *args: object) -> T:
    """fn(*args) on the prompt pool; its exceptions reach the caller unchanged."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(ctx.prompt_pool, functools.partial(fn, *args))
