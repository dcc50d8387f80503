"""pagedock/protocol/tools.py: tools and tool_choice checked as OpenAI and vLLM check them, and the
tool calls of messages in the shape chat templates read."""

from __future__ import annotations

from typing import Any

import pytest

from pagedock.errors import InvalidRequestError
from pagedock.limits import MAX_TOOLS, MAX_TOOLS_JSON_CHARS
from pagedock.protocol import ChatCompletionRequest
from pagedock.protocol.tools import read_tool_request, template_tool_calls


def tool(name: str = "get_weather", **function: Any) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": parameters, **function}}


def test_tools_without_tool_choice_mean_auto_with_parallel_calls() -> None:
    request = read_tool_request([tool()], None, None)
    assert request is not None
    assert (request.mode, request.function_name, request.parallel_tool_calls) == (
        "auto",
        None,
        True,
    )


@pytest.mark.parametrize("choice", ["none", "auto", "required"])
def test_the_three_tool_choice_modes(choice: str) -> None:
    request = read_tool_request([tool()], choice, False)
    assert request is not None and request.mode == choice and not request.parallel_tool_calls


def test_a_named_tool_choice_forces_that_function() -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    request = read_tool_request([tool(), tool("get_time")], choice, None)
    assert request is not None and (request.mode, request.function_name) == ("named", "get_time")


def test_no_tools_is_no_tool_request() -> None:
    assert read_tool_request(None, None, None) is None
    assert read_tool_request([], "none", None) is None


def rejected(tools: Any, choice: Any = None) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as error:
        read_tool_request(tools, choice, None)
    return error.value


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([{"type": "retrieval"}], '"type": "function"'),
        ([{"type": "function"}], "function must be an object"),
        ([tool("get weather")], "letters, digits"),
        ([tool("x" * 65)], "letters, digits"),
        ([tool(""), tool()], "letters, digits"),
        ([tool(), tool()], "a second function named 'get_weather'"),
        ([tool(parameters={"type": "array"})], '"type": "object"'),
        ([tool(parameters=["city"])], "JSON Schema object"),
        ([tool(description=7)], "description must be a string"),
        ([tool(f"f{i}") for i in range(MAX_TOOLS + 1)], f"at most {MAX_TOOLS} tools"),
        ([tool(description="x" * MAX_TOOLS_JSON_CHARS)], "characters of JSON"),
    ],
    ids=[
        "not-a-function",
        "no-function",
        "space-in-name",
        "long-name",
        "empty-name",
        "duplicate",
        "array-parameters",
        "list-parameters",
        "bad-description",
        "too-many",
        "too-large",
    ],
)
def test_bad_tools_are_a_400_on_tools(tools: list[Any], message: str) -> None:
    error = rejected(tools)
    assert error.param == "tools" and message in str(error)


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        (None, "required", "needs `tools`"),
        ([tool()], "always", "must be"),
        ([tool()], {"type": "function", "function": {"name": "get_time"}}, "not among the tools"),
        ([tool()], {"type": "function"}, "named tool_choice is"),
        ([tool()], {"type": "function", "function": {"name": 3}}, "named tool_choice is"),
    ],
    ids=["required-without-tools", "unknown-mode", "unknown-function", "no-function", "bad-name"],
)
def test_bad_tool_choice_is_a_400_on_tool_choice(tools: Any, choice: Any, message: str) -> None:
    error = rejected(tools, choice)
    assert error.param == "tool_choice" and message in str(error)


def test_assistant_tool_calls_reach_the_template_with_object_arguments() -> None:
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
    ]
    assert template_tool_calls(calls, "messages[1].tool_calls") == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
    ]


def test_a_chat_request_carries_tool_calls_and_tool_results_to_the_template() -> None:
    request = ChatCompletionRequest.model_validate(
        {
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
            ],
            "tools": [tool()],
        }
    )
    _, assistant, result = request.template_messages()
    assert assistant["content"] is None and assistant["tool_calls"][0]["function"]["name"] == "f"
    assert result == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    assert request.template_tools() == [tool()]


@pytest.mark.parametrize(
    ("message", "param"),
    [
        (
            {"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]},
            "messages[0]",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
            "messages[0].tool_calls",
        ),
    ],
    ids=["user-with-calls", "call-without-function"],
)
def test_malformed_tool_messages_are_a_400_naming_the_field(
    message: dict[str, Any], param: str
) -> None:
    request = ChatCompletionRequest.model_validate({"messages": [message]})
    with pytest.raises(InvalidRequestError) as error:
        request.template_messages()
    assert error.value.param == param


def test_a_tool_message_without_tool_call_id_is_accepted_as_vllm_accepts_it() -> None:
    request = ChatCompletionRequest.model_validate({"messages": [{"role": "tool", "content": "x"}]})
    assert request.template_messages() == [{"role": "tool", "content": "x"}]
