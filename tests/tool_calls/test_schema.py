"""engine/tool_calls/schema.py: the schema guided decoding enforces for forced calls admits
exactly the calls the tools allow, in the shape JsonListToolParser reads."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from engine.tool_calls import JsonListToolParser, tool_call_schema

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}
PING = {"type": "function", "function": {"name": "ping"}}  # no parameters
TOOLS = [WEATHER, PING]


def valid(schema: dict[str, Any], calls: Any) -> bool:
    try:
        jsonschema.validate(calls, schema)
    except jsonschema.ValidationError:
        return False
    return True


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(tool_call_schema(TOOLS))


def test_required_admits_a_call_to_any_tool_and_nothing_else() -> None:
    schema = tool_call_schema(TOOLS)
    assert valid(schema, [{"name": "get_weather", "arguments": {"city": "Paris"}}])
    assert valid(schema, [{"name": "ping", "arguments": {}}])
    assert valid(schema, [{"name": "ping", "arguments": {}}, {"name": "ping", "arguments": {}}])
    assert not valid(schema, [])
    assert not valid(schema, [{"name": "get_time", "arguments": {}}])
    assert not valid(schema, [{"name": "get_weather", "arguments": {"days": 2}}])  # no city
    assert not valid(schema, [{"name": "ping", "arguments": {"x": 1}}])  # ping takes none
    assert not valid(schema, [{"name": "get_weather"}])


def test_a_named_function_admits_only_calls_to_it() -> None:
    schema = tool_call_schema(TOOLS, function_name="get_weather")
    assert valid(schema, [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}])
    assert not valid(schema, [{"name": "ping", "arguments": {}}])
    assert not valid(schema, [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 0}}])


def test_without_parallel_tool_calls_one_call_at_most() -> None:
    schema = tool_call_schema(TOOLS, parallel_tool_calls=False)
    assert not valid(schema, [{"name": "ping", "arguments": {}}] * 2)


def test_an_unknown_function_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="no tool named"):
        tool_call_schema(TOOLS, function_name="get_time")


def test_what_the_schema_admits_the_json_list_parser_reads_back() -> None:
    calls = [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "ping", "arguments": {}},
    ]
    assert valid(tool_call_schema(TOOLS), calls)
    parsed = JsonListToolParser().extract(json.dumps(calls))
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        (c["name"], c["arguments"]) for c in calls
    ]
