"""Tool calling end to end with the built-in SmolLM2 behind `pagedock serve`, through the official
openai client: a forced call (named, and `required` among several tools) is a valid call to the
function's schema, guided by structured outputs; its result, sent back as a `tool` message, is
rendered into the next prompt; streamed deltas reassemble to the same call. Asserts are on
validity and rendering, never on answer quality. Modest in tokens: three forced calls of ~30
tokens each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from openai import OpenAI

from tests.server.server_process import ServerProcess, start_server

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "maxLength": 40}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, CLOCK]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
FORCE_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def server(
    smollm2_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    # The built-in model's default template is the tools-aware ChatML; hermes reads its calls.
    args = [
        "--model",
        "smollm2-135m-instruct",
        "--max-model-len",
        "2048",
        "--log-level",
        "warning",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    process = start_server(args, tmp_path_factory.mktemp("logs") / "smollm2-tools.log")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def openai_client(server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def chat(client: OpenAI, **fields: Any) -> Any:
    request = {"model": "smollm2-135m-instruct", "max_tokens": 64, "temperature": 0, **fields}
    return client.chat.completions.create(**request)


def assert_valid_call(call: Any, names: set[str]) -> dict[str, Any]:
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in names
    arguments: dict[str, Any] = json.loads(call.function.arguments)
    jsonschema.validate(arguments, PARAMETERS[call.function.name])
    return arguments


def rendered_prompt(server: ServerProcess, messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The prompt the engine renders for `messages` with TOOLS: its text and token count."""
    with httpx.Client(base_url=server.url, timeout=60) as http:
        tokenized = http.post("/tokenize", json={"messages": messages, "tools": TOOLS}).json()
        text = http.post("/detokenize", json={"tokens": tokenized["tokens"]}).json()["prompt"]
    return text, tokenized["count"]


FORCED = {
    "messages": ASK,
    "tools": TOOLS,
    "tool_choice": FORCE_WEATHER,
    "parallel_tool_calls": False,
}


@pytest.fixture(scope="module")
def forced(openai_client: OpenAI) -> Any:
    """One non-streamed, greedy response forced to call get_weather (shared: CPU time is dear)."""
    return chat(openai_client, **FORCED)


def test_a_forced_call_and_its_result_rendered_into_the_next_turn(
    server: ServerProcess, openai_client: OpenAI, forced: Any
) -> None:
    choice = forced.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    arguments = assert_valid_call(call, {"get_weather"})

    result = json.dumps({"temperature": 21, "unit": arguments["unit"]})
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
        ],
    }
    conversation = [*ASK, assistant, {"role": "tool", "tool_call_id": call.id, "content": result}]
    prompt, num_tokens = rendered_prompt(server, conversation)
    assert f'<tool_call>\n{{"name": "get_weather", "arguments": {json.dumps(arguments)}}}' in prompt
    assert f"<|im_start|>tool\n<tool_response>\n{result}\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")

    second = chat(
        openai_client, messages=conversation, tools=TOOLS, tool_choice="none", max_tokens=1
    )
    assert second.usage.prompt_tokens == num_tokens  # generated from exactly that prompt
    assert second.choices[0].message.tool_calls is None


def test_streamed_tool_call_deltas_reassemble_to_the_same_call(
    openai_client: OpenAI, forced: Any
) -> None:
    [whole] = forced.choices[0].message.tool_calls
    calls: dict[int, dict[str, str]] = {}
    content, finish_reasons = "", []
    for chunk in chat(openai_client, **FORCED, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        finish_reasons.append(chunk.choices[0].finish_reason)
        for piece in delta.tool_calls or []:
            if piece.index not in calls:  # the first piece of a call names it
                assert piece.id and piece.id.startswith("call_") and piece.function.name
                calls[piece.index] = {"name": piece.function.name, "arguments": ""}
            calls[piece.index]["arguments"] += piece.function.arguments or ""
    assert list(calls.values()) == [{"name": "get_weather", "arguments": whole.function.arguments}]
    assert content == "" and finish_reasons[-1] == "tool_calls"


def test_required_with_several_tools_is_a_valid_call_to_one_of_them(openai_client: OpenAI) -> None:
    # Sampled, so that only the guidance (not the model's own preference) keeps it valid.
    response = chat(
        openai_client,
        messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=1.0,
        seed=7,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert_valid_call(call, {"get_weather", "get_time"})
