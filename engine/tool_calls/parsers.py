"""Tool-call parsers: each reads one model family's call format out of generated text, chosen by
name as vLLM's `--tool-call-parser` is.

    hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, text around allowed
                 (Hermes, Qwen 2.5, the built-in SmolLM2's shipped template)
    llama3_json  [<|python_tag|>]{"name": ..., "parameters": {...}}; {...}: the whole output
                 is calls, or it is plain text (Llama 3.1 / 3.2 JSON tool calling)
    json_list    [{"name": ..., "arguments": {...}}, ...]: what guided decoding produces for
                 `tool_choice: required` or a named function (engine/tool_calls/schema.py)

`scan(text, final)` reads as far as the text goes (for streams); `extract(text)` reads a finished
output. A call that does not parse makes the whole output plain content, as vLLM's parsers do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from engine.tool_calls.calls import ParsedToolCalls, PartialCall, ToolScan, partial_call
from engine.tool_calls.json_scan import skip_whitespace, value_end
from pagedock.errors import ConfigError


class ToolCallParser(ABC):
    name: ClassVar[str]

    @abstractmethod
    def scan(self, text: str, final: bool) -> ToolScan:
        """The calls and the sendable content of `text`; `final` when no more text will come."""

    def extract(self, text: str) -> ParsedToolCalls:
        """The calls of a finished output and the text around them."""
        scan = self.scan(text, final=True)
        calls = [c.to_call() for c in scan.calls]
        if scan.malformed or any(c is None for c in calls):
            return ParsedToolCalls(text or None, [])
        return ParsedToolCalls(scan.content or None, [c for c in calls if c is not None])


class HermesToolParser(ToolCallParser):
    name = "hermes"
    START, END = "<tool_call>", "</tool_call>"

    def scan(self, text: str, final: bool) -> ToolScan:
        content: list[str] = []
        calls: list[PartialCall] = []
        pos = 0
        while (start := text.find(self.START, pos)) >= 0:
            # Whitespace next to a call belongs to the call's layout, not to the content.
            content.append(_strip_around(text[pos:start], after_call=bool(calls)).rstrip())
            body_start = start + len(self.START)
            end = text.find(self.END, body_start)
            body = text[body_start : end if end >= 0 else len(text)]
            calls.append(partial_call(body, ("arguments",), complete=end >= 0))
            if end < 0:
                return ToolScan("".join(content), calls)
            pos = end + len(self.END)
        tail = _strip_around(text[pos:], after_call=bool(calls))
        if not final:
            tail = _without_tag_start(tail, self.START).rstrip()
        content.append(tail)
        return ToolScan("".join(content), calls)


class Llama3JsonToolParser(ToolCallParser):
    name = "llama3_json"
    PYTHON_TAG = "<|python_tag|>"

    def scan(self, text: str, final: bool) -> ToolScan:
        i = skip_whitespace(text, 0)
        tagged = text.startswith(self.PYTHON_TAG, i)
        if tagged:
            i = skip_whitespace(text, i + len(self.PYTHON_TAG))
        elif not final and self.PYTHON_TAG.startswith(text[i:]):
            return ToolScan("", [])  # nothing yet, or what may become the tag
        if i >= len(text):
            return ToolScan(text if final and not tagged else "", [])
        if text[i] != "{":
            return ToolScan(text, [])  # a plain answer
        calls, rest = _object_sequence(text, i, ";", ("parameters", "arguments"))
        return ToolScan("", calls, malformed=_left_over(text, rest))


class JsonListToolParser(ToolCallParser):
    name = "json_list"

    def scan(self, text: str, final: bool) -> ToolScan:
        i = skip_whitespace(text, 0)
        if i >= len(text):
            return ToolScan("", [], malformed=final)
        if text[i] != "[":
            return ToolScan("", [], malformed=True)
        calls, rest = _object_sequence(text, i + 1, ",", ("arguments",))
        if rest is None or rest >= len(text) or text[rest] != "]":  # the list is still open
            return ToolScan("", calls, malformed=final or _left_over(text, rest))
        return ToolScan("", calls, malformed=_left_over(text, rest + 1))


def _object_sequence(
    text: str, i: int, separator: str, argument_keys: tuple[str, ...]
) -> tuple[list[PartialCall], int | None]:
    """Call objects from text[i] on, separated by `separator`; where they stop (None: inside
    an unfinished object)."""
    calls: list[PartialCall] = []
    while True:
        i = skip_whitespace(text, i)
        if i < len(text) and text[i] == separator and calls:
            i = skip_whitespace(text, i + 1)
        if i >= len(text) or text[i] != "{":
            return calls, i
        end = value_end(text, i)
        body = text[i : len(text) if end is None else end]
        calls.append(partial_call(body, argument_keys, complete=end is not None))
        if end is None:
            return calls, None
        i = end


def _left_over(text: str, rest: int | None) -> bool:
    """Whether non-whitespace text follows the calls."""
    if rest is None:
        return False
    return skip_whitespace(text, rest) < len(text)


def _strip_around(segment: str, after_call: bool) -> str:
    return segment.lstrip() if after_call else segment


def _without_tag_start(text: str, tag: str) -> str:
    """`text` less a trailing partial `tag` (`...<tool_c`), which may yet become the tag."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return text[:-n]
    return text


TOOL_CALL_PARSERS: dict[str, type[ToolCallParser]] = {
    p.name: p for p in (HermesToolParser, Llama3JsonToolParser)
}
"""What `--tool-call-parser` chooses from (json_list is the guided format, not a model's)."""


def parse_tool_calls(text: str, parser: str = "hermes") -> ParsedToolCalls:
    """The tool calls in a finished output (e.g. `LLM.chat`'s text) and the text around them;
    `parser` is hermes, llama3_json, or json_list for output guided by tool_call_schema."""
    if parser == JsonListToolParser.name:
        return JsonListToolParser().extract(text)
    return get_tool_call_parser(parser).extract(text)


def get_tool_call_parser(name: str) -> ToolCallParser:
    """The parser `--tool-call-parser NAME` selects; ConfigError naming the choices."""
    if name not in TOOL_CALL_PARSERS:
        choices = ", ".join(TOOL_CALL_PARSERS)
        raise ConfigError(f"unknown tool-call parser {name!r}; choose one of: {choices}")
    return TOOL_CALL_PARSERS[name]()
