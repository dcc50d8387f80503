"""Tool calling in /v1/chat/completions on the tiny model (its text is noise, so no call is
expected of it): tools and tool_choice checked with OpenAI-shaped 400s, `auto` only where the
server enables it (vLLM's rule), tools rendered into the prompt; and the server's glue that turns
a choice's text into `tool_calls` and streamed `delta.tool_calls`. The built-in SmolLM2, forced
to call, is tests/server/test_smollm2_tools.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from openai import OpenAI

from engine.config import EngineConfig
from engine.inputs.sampling_params import SamplingParams, StructuredOutputsParams
from engine.server.openai.context import ServerOptions
from engine.tool_calls import HermesToolParser, JsonListToolParser
from engine.tool_calls.chat_tools import ToolCalling, ToolDeltas, plan_tool_calling
from pagedock.errors import InvalidRequestError
from pagedock.protocol import ChatCompletionRequest
from pagedock.text.chat_template import SHIPPED_TEMPLATES_DIR
from tests.protocol.apps import client, server_app
from tests.server.inprocess_server import InProcessServer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def tools_server(long_tiny_model_dir: Path) -> Iterator[InProcessServer]:
    """The tiny model with the tools-aware ChatML and `auto` enabled with the hermes parser."""
    config = EngineConfig(
        model=str(long_tiny_model_dir),
        chat_template=str(SHIPPED_TEMPLATES_DIR / "chatml_tools.jinja"),
        max_model_len=4096,
        num_kv_blocks=512,
        num_threads=1,
    )
    options = ServerOptions(tool_call_parser="hermes", enable_auto_tool_choice=True)
    server = InProcessServer(config, options).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain_app() -> TestClient:
    """A server without --enable-auto-tool-choice (its engine is never reached: every request
    here is refused before generation)."""
    return client(server_app())


def openai_client(server: InProcessServer) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


# ---- 400s -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "string"}},
                    }
                ]
            },
            "tools",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER]}, "tool_choice"),  # auto, on a server that does not enable it
        ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice"),
    ],
    ids=[
        "bad-name",
        "duplicate-name",
        "non-object-parameters",
        "unknown-named-function",
        "unknown-mode",
        "required-without-tools",
        "default-auto-not-enabled",
        "auto-not-enabled",
    ],
)
def test_bad_tools_or_tool_choice_get_a_400_in_openai_shape(
    plain_app: TestClient, fields: dict[str, Any], param: str
) -> None:
    response = plain_app.post("/v1/chat/completions", json={"messages": USER, **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_auto_on_a_server_without_it_names_the_flags(plain_app: TestClient) -> None:
    body = {"messages": USER, "tools": [WEATHER]}
    message = plain_app.post("/v1/chat/completions", json=body).json()["error"]["message"]
    assert "--enable-auto-tool-choice" in message and "--tool-call-parser" in message


# ---- the tiny model, tools in its prompt ------------------------------------------------------


def test_tools_are_rendered_into_the_prompt(tools_server: InProcessServer) -> None:
    with httpx.Client(base_url=tools_server.url, timeout=60) as http:
        plain = http.post("/tokenize", json={"messages": USER}).json()
        with_tools = http.post("/tokenize", json={"messages": USER, "tools": [WEATHER]}).json()
        text = http.post("/detokenize", json={"tokens": with_tools["tokens"]}).json()["prompt"]
    assert with_tools["count"] > plain["count"]
    assert json.dumps(WEATHER) in text


@pytest.mark.parametrize("tool_choice", ["auto", "none"])
def test_auto_and_none_generate_and_read_back_consistently(
    tools_server: InProcessServer, tool_choice: str
) -> None:
    tools = openai_client(tools_server)
    request: dict[str, Any] = {
        "model": tools.models.list().data[0].id,
        "messages": USER,
        "tools": [WEATHER],
        "tool_choice": tool_choice,
        "max_tokens": 8,
        "temperature": 0,
    }
    response = tools.chat.completions.create(**request)
    choice = response.choices[0]
    assert choice.finish_reason in ("stop", "length")  # noise makes no call
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
    streamed = tools.chat.completions.create(**request, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == choice.message.content


# Tools whose every call is short, so that guided noise from the tiny model ends soon.
SET_MODE = {
    "type": "function",
    "function": {
        "name": "set_mode",
        "parameters": {
            "type": "object",
            "properties": {"mode": {"enum": ["on", "off"]}},
            "required": ["mode"],
            "additionalProperties": False,
        },
    },
}
PING = {"type": "function", "function": {"name": "ping"}}


def test_a_named_call_is_guided_and_streams_as_the_same_call(tools_server: InProcessServer) -> None:
    tools = openai_client(tools_server)
    request: dict[str, Any] = {
        "model": tools.models.list().data[0].id,
        "messages": USER,
        "tools": [WEATHER, SET_MODE],
        "tool_choice": {"type": "function", "function": {"name": "set_mode"}},
        "max_tokens": 128,
        "temperature": 0,
    }
    choice = tools.chat.completions.create(**request).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.function.name == "set_mode"
    assert json.loads(call.function.arguments)["mode"] in ("on", "off")
    streamed: dict[int, list[str]] = {}
    finish_reason = None
    for chunk in tools.chat.completions.create(**request, stream=True):
        for piece in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            assert piece.function is not None
            parts = streamed.setdefault(piece.index, [piece.function.name or ""])
            parts.append(piece.function.arguments or "")
        finish_reason = chunk.choices[0].finish_reason if chunk.choices else finish_reason
    assert {i: (p[0], "".join(p[1:])) for i, p in streamed.items()} == {
        0: ("set_mode", call.function.arguments)
    }
    assert finish_reason == "tool_calls"


def test_required_is_a_valid_call_to_one_of_the_tools(tools_server: InProcessServer) -> None:
    tools = openai_client(tools_server)
    choice = tools.chat.completions.create(
        model=tools.models.list().data[0].id,
        messages=USER,  # type: ignore[arg-type]
        tools=[SET_MODE, PING],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=128,
        temperature=1.0,
        seed=3,
    ).choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    arguments = json.loads(call.function.arguments)
    assert (call.function.name, arguments) in [
        ("ping", {}),
        ("set_mode", {"mode": "on"}),
        ("set_mode", {"mode": "off"}),
    ]


# ---- the glue: a choice's text as tool calls --------------------------------------------------


def test_a_text_with_calls_becomes_tool_calls_with_the_text_around_as_content() -> None:
    calling = ToolCalling(HermesToolParser())
    text = 'On it. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    message, called = calling.message(text)
    assert called and message.content == "On it."
    assert message.tool_calls is not None
    [call] = message.tool_calls
    assert (call.type, call.function.name, call.function.arguments) == (
        "function",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert calling.message("No call.") == (type(message)(content="No call."), False)


def test_streamed_deltas_carry_the_call_then_its_arguments_and_finish_as_tool_calls() -> None:
    deltas = ToolDeltas(ToolCalling(JsonListToolParser()))
    first = deltas.delta(0, '[{"name": "get_weather", "arguments": {"ci', finished=False)
    assert first.content is None and first.tool_calls is not None
    [announce] = first.tool_calls
    assert announce.index == 0 and announce.id is not None and announce.type == "function"
    assert announce.function is not None and announce.function.name == "get_weather"
    last = deltas.delta(0, 'ty": "Paris"}}]', finished=True)
    assert last.tool_calls is not None
    [fragment] = last.tool_calls
    assert fragment.id is None and fragment.function is not None
    assert announce.function.arguments + (fragment.function.arguments or "") == '{"city": "Paris"}'
    assert deltas.finish_reason(0, "stop") == "tool_calls"
    assert deltas.finish_reason(1, "stop") == "stop"


def test_forced_calls_are_guided_by_the_call_list_schema() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "messages": USER,
            "tools": [WEATHER],
            "tool_choice": "required",
            "parallel_tool_calls": False,
        }
    )
    calling = plan_tool_calling(ServerOptions(), body)
    assert calling is not None and isinstance(calling.parser, JsonListToolParser)
    params = calling.guide(SamplingParams())
    assert params.structured_outputs is not None
    schema = params.structured_outputs.json
    assert isinstance(schema, dict) and schema["type"] == "array" and schema["maxItems"] == 1
    guided = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+"))
    with pytest.raises(InvalidRequestError) as error:
        calling.guide(guided)
    assert error.value.param == "tool_choice"


def test_a_named_function_is_called_once_whatever_parallel_tool_calls_says() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "messages": USER,
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": True,
        }
    )
    calling = plan_tool_calling(ServerOptions(), body)
    assert calling is not None and calling.schema is not None
    assert calling.schema["maxItems"] == 1


def test_tool_choice_none_parses_nothing() -> None:
    body = ChatCompletionRequest.model_validate(
        {"messages": USER, "tools": [WEATHER], "tool_choice": "none"}
    )
    assert plan_tool_calling(ServerOptions(), body) is None


def test_a_resumed_stream_reads_on_from_the_text_generated_before() -> None:
    """A continuation (the router's failover) sends only what follows: the pieces of the first
    stream up to the break and of the resumed one reassemble to the whole call."""
    text = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    cut = text.index("Par")
    first = ToolDeltas(ToolCalling(JsonListToolParser())).delta(0, text[:cut], finished=False)
    resumed = ToolDeltas(ToolCalling(JsonListToolParser()), prior_text=text[:cut])
    rest = resumed.delta(0, text[cut:], finished=True)
    assert first.tool_calls is not None and rest.tool_calls is not None
    [announce], [fragment] = first.tool_calls, rest.tool_calls
    assert fragment.id is None and fragment.index == 0  # the call is not announced again
    assert announce.function is not None and fragment.function is not None
    arguments = (announce.function.arguments or "") + (fragment.function.arguments or "")
    assert (announce.function.name, arguments) == ("get_weather", '{"city": "Paris"}')
    assert resumed.finish_reason(0, "stop") == "tool_calls"
