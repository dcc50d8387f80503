"""vLLM's POST /tokenize and /detokenize: the engine's own tokenizer and chat template, so a client
can count tokens exactly as the engine will."""

from __future__ import annotations

from typing import Any

from pagedock.protocol.chat import ChatMessage, template_messages
from pagedock.protocol.openai import OpenAIModel, TokenId


class TokenizeRequest(OpenAIModel):
    """Either a prompt, or chat messages (the chat template is applied)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None
    """Rendered by the chat template, as a chat request's tools are."""

    def template_messages(self) -> list[dict[str, Any]]:
        return template_messages(self.messages or [])

    def template_tools(self) -> list[dict[str, Any]] | None:
        return self.tools or None


class TokenizeResponse(OpenAIModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(OpenAIModel):
    model: str | None = None
    tokens: list[TokenId]


class DetokenizeResponse(OpenAIModel):
    prompt: str
