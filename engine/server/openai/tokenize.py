"""POST /tokenize and /detokenize (vLLM's): the engine's own tokenizer and chat template, so a
client can count tokens exactly as the engine will: prompts and messages go through
pagedock/text/prompt_renderer.py, as generation's and the router's do."""

from __future__ import annotations

from engine.server.openai.context import ServerContext
from engine.server.openai.guards import resolve_model
from engine.server.openai.prompt_work import chat_chars, check_prompt_chars
from pagedock.errors import InvalidRequestError
from pagedock.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from pagedock.text.prompt_renderer import encode_text, render_chat, require_tokenizer


def tokenize(ctx: ServerContext, body: TokenizeRequest) -> TokenizeResponse:
    resolve_model(ctx, body.model)  # an adapter shares the base model's tokenizer
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequestError("send exactly one of `prompt` and `messages`", "prompt")
    if body.messages is not None:
        if not body.messages:
            raise InvalidRequestError("messages must not be empty", "messages")
        check_prompt_chars(ctx, chat_chars(body), "messages")
        tokens = render_chat(ctx.tokenizer, body).token_ids
    else:
        assert body.prompt is not None
        check_prompt_chars(ctx, len(body.prompt), "prompt")
        tokens = encode_text(ctx.tokenizer, body.prompt, "prompt", body.add_special_tokens)
    return TokenizeResponse(count=len(tokens), max_model_len=ctx.max_model_len, tokens=tokens)


def detokenize(ctx: ServerContext, body: DetokenizeRequest) -> DetokenizeResponse:
    resolve_model(ctx, body.model)  # an adapter shares the base model's tokenizer
    tokenizer = require_tokenizer(ctx.tokenizer, "tokens")
    vocab_size = tokenizer.vocab_size
    bad = [t for t in body.tokens if t >= vocab_size]
    if bad:
        raise InvalidRequestError(
            f"token ids must be in [0, {vocab_size}); got {bad[:5]}", "tokens"
        )
    return DetokenizeResponse(prompt=tokenizer.decode(body.tokens, skip_special_tokens=False))
