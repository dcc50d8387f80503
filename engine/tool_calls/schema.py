"""tool_call_schema: the JSON schema of the text guided decoding lets the model write when a
request forces a tool call (`tool_choice: required` or a named function).

As vLLM does, the guided output is the bare JSON of the call list, no format tags, whatever the
model's own call format; `JsonListToolParser` reads it back and the server wraps it as
`message.tool_calls`:

    [{"name": "get_weather", "arguments": {"city": "Paris"}}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A function declared without `parameters` takes none (OpenAI's rule).
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_call_schema(
    tools: Sequence[Mapping[str, Any]],
    function_name: str | None = None,
    parallel_tool_calls: bool = True,
) -> dict[str, Any]:
    """The schema of a list of calls: of `function_name` only when given, else of any tool; one
    call at most unless `parallel_tool_calls`. `tools` are OpenAI tool objects."""
    functions = [t["function"] for t in tools]
    if function_name is not None:
        functions = [f for f in functions if f["name"] == function_name]
    if not functions:
        raise ValueError(f"no tool named {function_name!r}")
    calls = [_call_schema(f) for f in functions]
    schema: dict[str, Any] = {
        "type": "array",
        "items": calls[0] if len(calls) == 1 else {"anyOf": calls},
        "minItems": 1,
    }
    if not parallel_tool_calls:
        schema["maxItems"] = 1
    return schema


def _call_schema(function: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [function["name"]]},
            "arguments": _parameters(function.get("parameters")),
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _parameters(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    if not parameters:
        return dict(_NO_PARAMETERS)
    return {"type": "object", **parameters}
