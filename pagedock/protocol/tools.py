"""Tools in the chat API: the request's `tools`, `tool_choice` and `parallel_tool_calls`, checked
as OpenAI and vLLM check them, and the tool calls of responses and of streamed deltas.

    tools:        [{"type": "function", "function": {"name", "description", "parameters"}}]
    tool_choice:  "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}

With tools and no tool_choice, the choice is "auto" (OpenAI's default). Every problem is an
InvalidRequestError (a 400) naming the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pagedock.errors import InvalidRequestError
from pagedock.limits import MAX_TOOLS, MAX_TOOLS_JSON_CHARS
from pagedock.protocol.openai import OpenAIModel

# OpenAI's rule for function names.
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_CHOICE_MODES = ("none", "auto", "required")


class FunctionCall(OpenAIModel):
    name: str
    arguments: str
    """The arguments object as JSON text."""


class ToolCall(OpenAIModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class DeltaFunctionCall(OpenAIModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(OpenAIModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


@dataclass
class ToolRequest:
    """A request's checked tools and what it asks of them."""

    tools: list[dict[str, Any]]
    mode: Literal["none", "auto", "required", "named"]
    function_name: str | None
    """The function a named tool_choice forces."""
    parallel_tool_calls: bool


def read_tool_request(
    tools: list[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None
) -> ToolRequest | None:
    """The request's tools checked; None when it has none (and names no tool_choice)."""
    if not tools:
        if tool_choice not in (None, "none"):
            raise InvalidRequestError("`tool_choice` needs `tools`", "tool_choice")
        return None
    checked = check_tools(tools)
    mode, name = _read_tool_choice(tool_choice, {t["function"]["name"] for t in checked})
    parallel = True if parallel_tool_calls is None else parallel_tool_calls
    return ToolRequest(checked, mode, name, parallel)


def check_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """`tools` as OpenAI defines them: at most MAX_TOOLS, unique well-formed names, object
    parameter schemas, MAX_TOOLS_JSON_CHARS of JSON in all."""
    if len(tools) > MAX_TOOLS:
        raise InvalidRequestError(f"at most {MAX_TOOLS} tools, got {len(tools)}", "tools")
    try:
        size = len(json.dumps(tools))
    except (TypeError, ValueError) as e:
        raise InvalidRequestError(f"tools must be JSON: {e}", "tools") from e
    if size > MAX_TOOLS_JSON_CHARS:
        raise InvalidRequestError(
            f"the tools take {size} characters of JSON; at most {MAX_TOOLS_JSON_CHARS}", "tools"
        )
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = _check_tool(tool, f"tools[{i}]")
        if name in seen:
            raise InvalidRequestError(f"tools[{i}]: a second function named {name!r}", "tools")
        seen.add(name)
    return tools


def _check_tool(tool: Any, where: str) -> str:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise InvalidRequestError(
            f'{where} must be {{"type": "function", "function": ...}}', "tools"
        )
    function = tool.get("function")
    if not isinstance(function, dict):
        raise InvalidRequestError(f"{where}.function must be an object", "tools")
    name = function.get("name")
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise InvalidRequestError(
            f"{where}.function.name must be 1 to 64 letters, digits, _ or -; got {name!r}", "tools"
        )
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidRequestError(f"{where}.function.description must be a string", "tools")
    _check_parameters(function.get("parameters"), f"{where}.function.parameters")
    return name


def _check_parameters(parameters: Any, where: str) -> None:
    if parameters is None:
        return  # a function without parameters
    if not isinstance(parameters, dict):
        raise InvalidRequestError(f"{where} must be a JSON Schema object", "tools")
    if parameters.get("type", "object") != "object":
        raise InvalidRequestError(
            f'{where} must describe an object ("type": "object"), got {parameters["type"]!r}',
            "tools",
        )


def _read_tool_choice(
    choice: Any, names: set[str]
) -> tuple[Literal["none", "auto", "required", "named"], str | None]:
    if choice is None or choice == "auto":
        return "auto", None
    if choice == "none" or choice == "required":
        return choice, None
    if isinstance(choice, str):
        raise InvalidRequestError(
            f'tool_choice must be "none", "auto", "required" or a named function; got {choice!r}',
            "tool_choice",
        )
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(choice, dict)
        or choice.get("type") != "function"
        or not isinstance(name, str)
    ):
        raise InvalidRequestError(
            'a named tool_choice is {"type": "function", "function": {"name": ...}}', "tool_choice"
        )
    if name not in names:
        raise InvalidRequestError(
            f"tool_choice names function {name!r}, which is not among the tools", "tool_choice"
        )
    return "named", name


def template_tool_calls(tool_calls: list[Any], where: str) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls` as chat templates read them (transformers' shape, as
    vLLM passes them): JSON-text arguments become objects, so `arguments | tojson` works."""
    return [_template_tool_call(call, f"{where}[{i}]") for i, call in enumerate(tool_calls)]


def _template_tool_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidRequestError(
            f'{where} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}',
            where.rsplit("[", 1)[0],
        )
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        arguments = parsed if isinstance(parsed, dict) else arguments
    rendered = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if "id" in call:
        rendered["id"] = call["id"]
    return rendered
