"""pagedock/text/templates/chatml_tools.jinja, the built-in SmolLM2's default template: plain chats
render exactly as SmolLM2's own template; tools, calls and results render Hermes-style, as
transformers renders the same template; and `--chat-template` chooses another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.tool_calls import HermesToolParser
from pagedock.errors import ConfigError, ModelLoadError
from pagedock.models.registry import BUILTIN_MODELS, DEFAULT_MODEL
from pagedock.text.chat_template import SHIPPED_TEMPLATES_DIR, ChatTemplate, chat_template_source
from pagedock.text.tokenizer import Tokenizer

SHIPPED = SHIPPED_TEMPLATES_DIR / "chatml_tools.jinja"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
}
TOOL_CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": '{"temperature_c": 21}', "tool_call_id": "call_1"},
]
PLAIN_CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ],
    [{"role": "developer", "content": ""}, {"role": "user", "content": "a\nb"}],
]


@pytest.fixture(scope="module")
def shipped() -> ChatTemplate:
    return ChatTemplate(
        SHIPPED.read_text(), {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    )


def test_the_built_in_model_renders_with_the_shipped_template() -> None:
    assert BUILTIN_MODELS[DEFAULT_MODEL].chat_template == SHIPPED.name


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", PLAIN_CONVERSATIONS)
def test_a_chat_without_tools_renders_as_smollm2s_own_template(
    smollm2_tokenizer: Tokenizer,
    shipped: ChatTemplate,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
) -> None:
    own = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt)
    assert shipped.render(messages, add_generation_prompt) == own


def test_tools_are_listed_in_the_system_turn(shipped: ChatTemplate) -> None:
    text = shipped.render(
        [{"role": "system", "content": "Be brief."}, *TOOL_CONVERSATION[:1]], tools=[WEATHER_TOOL]
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert f"<tools>\n{json.dumps(WEATHER_TOOL)}\n</tools>" in text
    assert text.count("<|im_start|>system") == 1


def test_a_call_renders_as_the_hermes_parser_reads_it(shipped: ChatTemplate) -> None:
    text = shipped.render(TOOL_CONVERSATION[:2], add_generation_prompt=False, tools=[WEATHER_TOOL])
    turn = text.split("<|im_start|>assistant\n")[1].removesuffix("<|im_end|>\n")
    [call] = HermesToolParser().extract(turn).calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})


def test_a_tool_result_is_a_tool_turn_in_tool_response(shipped: ChatTemplate) -> None:
    text = shipped.render(TOOL_CONVERSATION, tools=[WEATHER_TOOL])
    expected = (
        '<|im_start|>tool\n<tool_response>\n{"temperature_c": 21}\n</tool_response><|im_end|>\n'
    )
    assert text.endswith(expected + "<|im_start|>assistant\n")


@pytest.mark.slow
def test_transformers_renders_the_shipped_template_identically(
    smollm2_hf_tokenizer: Any, shipped: ChatTemplate
) -> None:
    expected = smollm2_hf_tokenizer.apply_chat_template(
        TOOL_CONVERSATION,
        tools=[WEATHER_TOOL],
        chat_template=SHIPPED.read_text(),
        add_generation_prompt=True,
        tokenize=False,
    )
    assert shipped.render(TOOL_CONVERSATION, tools=[WEATHER_TOOL]) == expected


# ---- --chat-template ----------------------------------------------------------------------------


def test_chat_template_takes_a_file_path_or_the_template_itself(tmp_path: Path) -> None:
    file = tmp_path / "t.jinja"
    file.write_text("{{ messages[0]['content'] }}")
    assert chat_template_source(str(file)) == "{{ messages[0]['content'] }}"
    assert chat_template_source("{{ 'inline' }}") == "{{ 'inline' }}"


def test_chat_template_wins_over_the_shipped_one_and_none_keeps_the_models_own() -> None:
    assert chat_template_source("{{ 'mine' }}", SHIPPED) == "{{ 'mine' }}"
    assert chat_template_source(None, SHIPPED) == SHIPPED.read_text()
    assert chat_template_source(None, None) is None


def test_a_chat_template_that_is_neither_file_nor_template_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no such file"):
        chat_template_source("/no/such/template.jinja")


def test_a_chat_template_that_is_not_jinja_fails_at_startup() -> None:
    with pytest.raises(ModelLoadError, match="not valid Jinja"):
        chat_template_source("{% if %}")
