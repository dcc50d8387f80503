"""A Responses API turn as the chat path's request: the conversation's items become chat messages
and the request's settings the chat request's, so a response is rendered by the same chat
template, sampled with the same params and its tool calls read by the same parsers as a chat
completion (and a router renders the same token ids from the same code).

    instructions           a system message first (this request's only: OpenAI does not carry
                           them over from a previous response)
    message                a message of its role, the parts' text joined
    function_call          an assistant message's `tool_calls` (the calls of one turn, and the
                           text before them, are one assistant message)
    function_call_output   a `tool` message with its `tool_call_id`
    tools                  {type, name, ...} -> {type, function: {name, ...}}
    tool_choice            {type: function, name} -> {type: function, function: {name}}
    text.format            response_format: json_schema, json_object or none
"""

from __future__ import annotations

from typing import Any

from pagedock.errors import InvalidRequestError
from pagedock.protocol.chat import ChatCompletionRequest, ChatMessage
from pagedock.protocol.openai import JsonSchemaFormat, ResponseFormat
from pagedock.protocol.response_items import (
    ConversationItem,
    FunctionCallItem,
    MessageItem,
)
from pagedock.protocol.responses import JsonObjectFormat, JsonSchemaTextFormat, ResponsesRequest

# The request's fields that mean the same on the chat endpoint, under the same name.
_SAME_FIELDS = (
    "model",
    "temperature",
    "top_p",
    "stream",
    "user",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "cache_salt",
    "parallel_tool_calls",
)


def chat_request(body: ResponsesRequest, items: list[ConversationItem]) -> ChatCompletionRequest:
    """The whole conversation (`items`: the stored history, then this request's input) as a chat
    completion request. 400s for tools, tool_choice or items the chat path cannot take."""
    fields: dict[str, Any] = {name: getattr(body, name) for name in _SAME_FIELDS}
    fields.update(
        messages=conversation_messages(body.instructions, items),
        max_completion_tokens=body.max_output_tokens,
        tools=chat_tools(body.tools),
        tool_choice=chat_tool_choice(body.tool_choice),
        response_format=chat_response_format(body),
    )
    if "priority" in body.model_fields_set:  # the tenant's bound applies only to one asked for
        fields["priority"] = body.priority
    return ChatCompletionRequest(**fields)


def conversation_messages(
    instructions: str | None, items: list[ConversationItem]
) -> list[ChatMessage]:
    messages = [] if instructions is None else [ChatMessage(role="system", content=instructions)]
    call_ids: set[str] = set()
    for item in items:
        if isinstance(item, MessageItem):
            messages.append(ChatMessage(role=item.role, content=item.text))
        elif isinstance(item, FunctionCallItem):
            call_ids.add(item.call_id)
            _add_call(messages, item)
        else:
            if item.call_id not in call_ids:
                raise InvalidRequestError(
                    f"no function_call with call_id {item.call_id!r} precedes the "
                    "function_call_output that answers it",
                    "input",
                )
            messages.append(
                ChatMessage(role="tool", content=item.output, tool_call_id=item.call_id)
            )
    return messages


def _add_call(messages: list[ChatMessage], item: FunctionCallItem) -> None:
    call = {
        "id": item.call_id,
        "type": "function",
        "function": {"name": item.name, "arguments": item.arguments},
    }
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":  # one model turn: its text, then its calls
        last.tool_calls = [*(last.tool_calls or []), call]
    else:
        messages.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Function tools in the chat shape (the chat path checks them further); any other tool
    type is a 400."""
    if not tools:
        return None
    return [_chat_tool(tool, i) for i, tool in enumerate(tools)]


def _chat_tool(tool: dict[str, Any], index: int) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise InvalidRequestError(
            f"tools[{index}]: only function tools are supported by this server, got type "
            f"{tool.get('type')!r}",
            "tools",
        )
    keys = ("name", "description", "parameters", "strict")
    return {"type": "function", "function": {k: tool[k] for k in keys if tool.get(k) is not None}}


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """none, auto and required as they are (the chat path checks them); a named function in the
    chat shape; anything else (allowed_tools, hosted tools) a 400."""
    if choice is None or isinstance(choice, str):
        return choice
    name = choice.get("name")
    if choice.get("type") != "function" or not isinstance(name, str):
        raise InvalidRequestError(
            'tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}',
            "tool_choice",
        )
    return {"type": "function", "function": {"name": name}}


def chat_response_format(body: ResponsesRequest) -> ResponseFormat | None:
    """`text.format` as the chat path's response_format (enforced by structured outputs)."""
    text_format = None if body.text is None else body.text.format
    if isinstance(text_format, JsonObjectFormat):
        return ResponseFormat(type="json_object")
    if isinstance(text_format, JsonSchemaTextFormat):
        spec = JsonSchemaFormat.model_validate(
            {
                "name": text_format.name,
                "description": text_format.description,
                "schema": text_format.json_schema,
                "strict": text_format.strict,
            }
        )
        return ResponseFormat(type="json_schema", json_schema=spec)
    return None
