"""POST /v1/chat/completions: messages, the request, the response and its streamed chunks.

`template_messages()` is the one place that turns the message shapes the API accepts into what a
chat template reads; pagedock/text/prompt_renderer.py renders only through it, for the engine's
server, its offline `LLM.chat` and the router alike, so their token ids agree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from pagedock.errors import InvalidRequestError
from pagedock.protocol.openai import (
    MAX_INT32,
    MAX_TOP_LOGPROBS,
    OpenAIModel,
    PromptLogprobsField,
    SamplingFields,
    UsageInfo,
    now_s,
    random_id,
)
from pagedock.protocol.tools import (
    DeltaToolCall,
    ToolCall,
    ToolRequest,
    read_tool_request,
    template_tool_calls,
)


class ContentPart(OpenAIModel):
    type: str
    text: str | None = None


class ChatMessage(OpenAIModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as a chat template wants them (transformers' shape): role, plain-text
    content, and the `name`, `tool_calls` and `tool_call_id` a message carries."""
    return [_template_message(i, m) for i, m in enumerate(messages)]


def _template_message(index: int, message: ChatMessage) -> dict[str, Any]:
    where = f"messages[{index}]"
    rendered: dict[str, Any] = {"role": message.role, "content": _message_text(message)}
    if message.name is not None:
        rendered["name"] = message.name
    if message.tool_calls:
        if message.role != "assistant":
            raise InvalidRequestError(f"{where}: only assistant messages carry tool_calls", where)
        rendered["tool_calls"] = template_tool_calls(message.tool_calls, f"{where}.tool_calls")
    # NOTE: OpenAI requires tool_call_id on tool messages; vLLM accepts them without, and so
    # does pagedock (the templates that print it only print it when it is there).
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    return rendered


def _message_text(message: ChatMessage) -> str | None:
    if message.content is None:
        return None if message.tool_calls else ""
    if isinstance(message.content, str):
        return message.content
    return "".join(p.text or "" for p in message.content)


def unsupported_message_field(messages: list[ChatMessage]) -> str | None:
    """The first message field pagedock cannot render (non-text parts), or None."""
    for i, message in enumerate(messages):
        if isinstance(message.content, list) and any(
            p.type != "text" or p.text is None for p in message.content
        ):
            return f"messages[{i}].content"
    return None


class Conversation(OpenAIModel):
    """Messages to render with the chat template and nothing else (`LLM.chat`'s input)."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None

    def template_messages(self) -> list[dict[str, Any]]:
        return template_messages(self.messages)

    def template_tools(self) -> list[dict[str, Any]] | None:
        return self.tools or None


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1, le=MAX_INT32)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=MAX_INT32)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    # vLLM's chat extras.
    add_generation_prompt: bool = True
    echo: bool = False

    def unsupported_field(self) -> str | None:
        checks = {
            "functions": bool(self.functions),
            "function_call": self.function_call not in (None, "none", "auto"),
            "audio": self.audio is not None,
            "modalities": self.modalities is not None and self.modalities != ["text"],
            "prediction": self.prediction is not None,
            "web_search_options": self.web_search_options is not None,
        }
        for name, unsupported in checks.items():
            if unsupported:
                return name
        return unsupported_message_field(self.messages) or super().unsupported_field()

    @property
    def resolved_max_tokens(self) -> int | None:
        """max_completion_tokens is OpenAI's newer name; it wins when both are set."""
        return self.max_completion_tokens or self.max_tokens

    def template_messages(self) -> list[dict[str, Any]]:
        return template_messages(self.messages)

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools as the client sent them: the chat template renders them (with "none" too,
        as vLLM does), and the router renders the same dicts."""
        return self.tools or None

    def tool_request(self) -> ToolRequest | None:
        """The tools and tool_choice checked (400s); None for a request without tools."""
        return read_tool_request(self.tools, self.tool_choice, self.parallel_tool_calls)


class TopLogprob(OpenAIModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatChoiceLogprobs(OpenAIModel):
    content: list[ChatTokenLogprob] | None = None


class ChatResponseMessage(OpenAIModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(OpenAIModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionResponse(OpenAIModel):
    id: str = Field(default_factory=lambda: random_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now_s)
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: UsageInfo
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: PromptLogprobsField | None = None


class DeltaMessage(OpenAIModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatChunkChoice(OpenAIModel):
    index: int
    delta: DeltaMessage
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(OpenAIModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None
    prompt_token_ids: list[int] | None = None
