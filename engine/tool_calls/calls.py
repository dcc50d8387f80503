"""Tool calls read out of generated text: whole ones (a response's `message.tool_calls`) and the
partial ones a stream sees while the text grows."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from engine.tool_calls.json_scan import scan_object


def new_call_id() -> str:
    """`call_<random>`, the shape of OpenAI's tool-call ids."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    """One function call the model made."""

    name: str
    arguments: str
    """The arguments object as JSON text, exactly as the model wrote it (it parses)."""
    id: str = field(default_factory=new_call_id)


@dataclass
class ParsedToolCalls:
    """Generated text split into the calls it makes and the text around them."""

    content: str | None
    """Text outside the calls; None when there is none (OpenAI's `content: null`)."""
    calls: list[ToolCall]


@dataclass
class PartialCall:
    """A call as far as the text goes: the name once its string is closed, the arguments' raw
    text so far (always a prefix of the final arguments text)."""

    body: str
    """The call's JSON object text (all of it once `complete`)."""
    name: str | None
    arguments: str
    complete: bool
    argument_keys: tuple[str, ...] = ("arguments",)

    def to_call(self) -> ToolCall | None:
        """The finished call, or None when its text is not a valid call object."""
        return read_call(self.body, self.argument_keys) if self.complete else None


@dataclass
class ToolScan:
    """What a parser sees in a (possibly unfinished) text."""

    content: str
    """Text outside the calls that is safe to send (a possible tag start is held back)."""
    calls: list[PartialCall]
    malformed: bool = False
    """The text cannot be read as the format's calls (the whole text is then content)."""


def partial_call(body: str, argument_keys: tuple[str, ...], complete: bool) -> PartialCall:
    """Read a call object's text as far as it goes."""
    scan = scan_object(body)
    name = None
    span = scan.values.get("name")
    if span is not None and span[1] is not None:
        value = _loads(body[span[0] : span[1]])
        name = value if isinstance(value, str) else None
    arguments = ""
    for key in argument_keys:
        if key in scan.values:
            start, end = scan.values[key]
            arguments = body[start : len(body) if end is None else end]
            break
    return PartialCall(body, name, arguments, complete, argument_keys)


def read_call(body: str, argument_keys: tuple[str, ...]) -> ToolCall | None:
    """A call from `{"name": ..., "<argument key>": {...}}`; None if it is anything else.

    The arguments keep the model's own text; a call without arguments gets `{}`."""
    obj = _loads(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    key = next((k for k in argument_keys if k in obj), None)
    if key is None:
        return ToolCall(obj["name"], "{}")
    if not isinstance(obj[key], dict):
        return None
    start, end = scan_object(body).values[key]
    assert end is not None  # the body parsed, so every value in it is closed
    return ToolCall(obj["name"], body[start:end])


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None
