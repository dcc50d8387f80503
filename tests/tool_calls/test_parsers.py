"""engine/tool_calls/parsers.py: tool calls read out of finished outputs, per format."""

from __future__ import annotations

import json

import pytest

from engine.tool_calls import (
    HermesToolParser,
    JsonListToolParser,
    Llama3JsonToolParser,
    get_tool_call_parser,
    parse_tool_calls,
)
from pagedock.errors import ConfigError

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'


def names_and_arguments(text: str, parser: str) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in parse_tool_calls(text, parser).calls]


# ---- hermes -----------------------------------------------------------------------------------


def test_hermes_reads_a_call_and_keeps_the_models_argument_text() -> None:
    parsed = HermesToolParser().extract(f"<tool_call>\n{WEATHER}\n</tool_call>")
    assert parsed.content is None
    [call] = parsed.calls
    assert call.name == "get_weather"
    assert call.arguments == '{"city": "Paris", "unit": "celsius"}'
    assert call.id.startswith("call_") and len(call.id) > len("call_")


def test_hermes_reads_several_calls_and_the_text_around_them() -> None:
    text = (
        "Let me look both up.\n<tool_call>\n" + WEATHER + "\n</tool_call>\n"
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>\nDone.'
    )
    parsed = HermesToolParser().extract(text)
    assert parsed.content == "Let me look both up.Done."
    assert [c.name for c in parsed.calls] == ["get_weather", "get_time"]
    assert len({c.id for c in parsed.calls}) == 2


def test_hermes_output_without_calls_is_content_unchanged() -> None:
    parsed = HermesToolParser().extract("  Paris is sunny.\n")
    assert parsed.content == "  Paris is sunny.\n" and parsed.calls == []


def test_hermes_braces_and_tags_inside_argument_strings_do_not_confuse_it() -> None:
    text = (
        '<tool_call>{"name": "echo", "arguments": {"text": "a } ] \\" <tool_call> {"}}</tool_call>'
    )
    [call] = HermesToolParser().extract(text).calls
    assert json.loads(call.arguments) == {"text": 'a } ] " <tool_call> {'}


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>',  # a brace short
        '<tool_call>{"name": "f", "arguments": {"x": 1}}',  # never closed (length cut)
        '<tool_call>{"arguments": {"x": 1}}</tool_call>',  # no name
        '<tool_call>{"name": "f", "arguments": "x=1"}</tool_call>',  # arguments not an object
        "<tool_call>not json</tool_call>",
    ],
    ids=["unbalanced", "unterminated", "no-name", "string-arguments", "not-json"],
)
def test_a_malformed_hermes_call_leaves_the_whole_output_as_content(text: str) -> None:
    parsed = HermesToolParser().extract("Sure. " + text)
    assert parsed.calls == [] and parsed.content == "Sure. " + text


def test_a_hermes_call_without_arguments_gets_an_empty_object() -> None:
    [call] = HermesToolParser().extract('<tool_call>{"name": "ping"}</tool_call>').calls
    assert call.arguments == "{}"


# ---- llama3_json ------------------------------------------------------------------------------


def test_llama3_reads_parameters_after_the_python_tag_and_several_calls() -> None:
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'
    assert names_and_arguments(text, "llama3_json") == [("a", {"x": 1}), ("b", {})]
    assert Llama3JsonToolParser().extract(text).content is None


def test_llama3_accepts_arguments_as_the_key_and_leading_whitespace() -> None:
    text = '\n {"name": "a", "arguments": {"x": [1, 2]}}'
    assert names_and_arguments(text, "llama3_json") == [("a", {"x": [1, 2]})]


@pytest.mark.parametrize(
    "text",
    [
        "The weather is fine.",
        '{"answer": 42}',  # JSON, but not a call
        '{"name": "a", "parameters": {"x": 1}} and then some words',
        '{"name": "a", "parameters": {"x": ',
    ],
    ids=["prose", "json-not-a-call", "trailing-text", "cut-off"],
)
def test_llama3_output_that_is_not_only_calls_is_content(text: str) -> None:
    parsed = Llama3JsonToolParser().extract(text)
    assert parsed.calls == [] and parsed.content == text


# ---- json_list (guided output) ----------------------------------------------------------------


def test_the_guided_json_list_reads_every_call() -> None:
    text = '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": "z"}}]'
    assert names_and_arguments(text, "json_list") == [("a", {"x": 1}), ("b", {"y": "z"})]
    assert JsonListToolParser().extract(text).content is None


@pytest.mark.parametrize(
    "text", ['[{"name": "a", "arguments": {"x": 1}}', "[]x", '{"name": "a"}', ""]
)
def test_a_guided_list_cut_short_or_malformed_is_content(text: str) -> None:
    assert JsonListToolParser().extract(text).calls == []


# ---- choosing a parser ------------------------------------------------------------------------


def test_parsers_are_chosen_by_vllms_names() -> None:
    assert isinstance(get_tool_call_parser("hermes"), HermesToolParser)
    assert isinstance(get_tool_call_parser("llama3_json"), Llama3JsonToolParser)


def test_an_unknown_parser_name_is_a_config_error_listing_the_choices() -> None:
    with pytest.raises(ConfigError, match="hermes, llama3_json"):
        get_tool_call_parser("mistral")
