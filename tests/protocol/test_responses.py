"""The Responses API's request as pagedock reads it: input items, fields it refuses by name, and
the turn as the chat path's request (pagedock/protocol/responses.py, response_items.py,
response_chat.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pagedock.errors import InvalidRequestError
from pagedock.protocol.response_chat import chat_request
from pagedock.protocol.response_items import (
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    read_input_items,
)
from pagedock.protocol.responses import ResponsesRequest, response_shell

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def chat_of(**fields: Any) -> Any:
    body = ResponsesRequest.model_validate(fields)
    return chat_request(body, read_input_items(body.input))


def test_a_string_input_is_one_user_message_with_an_id() -> None:
    [item] = read_input_items("Hello")
    assert isinstance(item, MessageItem) and item.role == "user"
    assert item.id.startswith("msg_") and item.content[0].type == "input_text"
    assert item.text == "Hello"


def test_items_keep_their_ids_and_the_assistants_text_is_output_text() -> None:
    items = read_input_items(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "a"}], "id": "msg_1"},
            {"type": "message", "role": "assistant", "content": "b"},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        ]
    )
    user, assistant, call, result = items
    assert isinstance(user, MessageItem) and user.id == "msg_1"
    assert isinstance(assistant, MessageItem) and assistant.content[0].type == "output_text"
    assert isinstance(call, FunctionCallItem) and call.id.startswith("fc_")
    assert isinstance(result, FunctionCallOutputItem) and result.output == "42"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ([], "input"),
        (["hi"], "input[0]"),
        ([{"type": "reasoning", "summary": []}], "input[0].type"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], None),
        ([{"role": "tool", "content": "x"}], "input[0].role"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
    ],
    ids=["empty", "not-an-object", "reasoning-item", "image-part", "bad-role", "no-call-id"],
)
def test_input_the_server_cannot_take_is_a_400_naming_where(raw: Any, param: str | None) -> None:
    with pytest.raises(InvalidRequestError) as error:
        read_input_items(raw)
    expected = param or "input[0].content[0]"
    assert error.value.param == expected, str(error.value)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"background": True}, "background"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"truncation": "auto"}, "truncation"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"service_tier": "flex"}, "service_tier"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ],
)
def test_fields_pagedock_does_not_implement_are_named(fields: dict[str, Any], name: str) -> None:
    body = ResponsesRequest.model_validate({"input": "x", **fields})
    assert body.unsupported_field() == name


def test_clients_default_values_of_unimplemented_fields_are_accepted() -> None:
    body = ResponsesRequest.model_validate(
        {
            "input": "x",
            "reasoning": {"effort": None, "summary": None},
            "truncation": "disabled",
            "service_tier": "auto",
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "include": [],
            "top_logprobs": 0,
        }
    )
    assert body.unsupported_field() is None


def test_instructions_come_first_as_a_system_message() -> None:
    chat = chat_of(input="Hi", instructions="Be brief.")
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "Be brief."),
        ("user", "Hi"),
    ]


def test_a_turns_text_and_calls_are_one_assistant_message_and_results_are_tool_messages() -> None:
    chat = chat_of(
        input=[
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": "rain"},
        ]
    )
    _, assistant, first, second = chat.messages
    assert assistant.role == "assistant" and assistant.content == "Checking."
    assert [c["id"] for c in assistant.tool_calls or []] == ["c1", "c2"]
    assert (first.role, first.tool_call_id, first.content) == ("tool", "c1", "sunny")
    assert (second.tool_call_id, second.content) == ("c2", "rain")
    assert chat.template_messages()[1]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_result_without_its_call_is_a_400() -> None:
    with pytest.raises(InvalidRequestError, match="call_id 'nope'"):
        chat_of(input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}])


def test_function_tools_and_a_named_choice_take_the_chat_shape() -> None:
    chat = chat_of(input="x", tools=[WEATHER], tool_choice={"type": "function", "name": "f"})
    assert chat.tools == [
        {
            "type": "function",
            "function": {k: v for k, v in WEATHER.items() if k != "type"},
        }
    ]
    assert chat.tool_choice == {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "file_search"}}, "tool_choice"),
    ],
)
def test_hosted_tools_are_a_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        chat_of(input="x", **fields)
    assert error.value.param == param


def test_text_format_becomes_the_chat_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = chat_of(
        input="x",
        text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}},
    )
    assert chat.response_format is not None and chat.response_format.type == "json_schema"
    assert chat.response_format.json_schema is not None
    assert chat.response_format.json_schema.json_schema == schema
    plain = chat_of(input="x", text={"format": {"type": "text"}})
    assert plain.response_format is None
    assert chat_of(input="x", text={"format": {"type": "json_object"}}).response_format


def test_sampling_settings_carry_over_and_priority_only_when_asked() -> None:
    chat = chat_of(input="x", max_output_tokens=7, temperature=0.5, top_p=0.9, seed=3)
    assert (chat.resolved_max_tokens, chat.temperature, chat.top_p, chat.seed) == (7, 0.5, 0.9, 3)
    assert "priority" not in chat.model_fields_set
    assert chat_of(input="x", priority=5).priority == 5


def test_the_response_echoes_the_settings_with_explicit_defaults() -> None:
    body = ResponsesRequest.model_validate(
        {
            "input": "x",
            "previous_response_id": "resp_1",
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
        }
    )
    response = response_shell(body, "tiny")
    wire = response.model_dump(mode="json", by_alias=True)
    assert wire["id"].startswith("resp_") and wire["object"] == "response"
    assert wire["previous_response_id"] == "resp_1" and wire["store"] is True
    assert (wire["temperature"], wire["top_p"], wire["tool_choice"]) == (1.0, 1.0, "auto")
    assert wire["text"]["format"]["schema"] == {"type": "object"}
    assert "output_text" not in wire
