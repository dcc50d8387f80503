"""Where the values of a JSON object begin and end, in text that may stop part-way through it.

A streamed tool call arrives a few characters at a time: its function name can be sent once the
`"name"` string is closed, and its arguments as the raw text of the `"arguments"` value so far.
Sending raw text (never re-serialised JSON) keeps every streamed fragment a prefix of the final
arguments string, so the fragments always concatenate to exactly what a non-streamed response
carries. Validity is judged once, by `json.loads`, on the whole text; this scanner only locates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_WHITESPACE = " \t\r\n"
_SCALAR_END = _WHITESPACE + ",}]:"
# A string (closed when group 1 matched) or a bracket; everything else inside a container is
# skipped. A trailing backslash leaves the string open, as it is until its escape arrives.
_CONTAINER_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*("?)|[\[\]{}]')


@dataclass
class ObjectScan:
    """The spans of one JSON object's top-level values, as far as the text goes."""

    values: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    """Key -> (start, end) of its value in the text; end is None while the value is open."""
    end: int | None = None
    """Just past the closing brace; None while the object is open (or is not an object)."""
    is_object: bool = True
    """False when the text at the start holds something other than an object."""


def skip_whitespace(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def string_end(text: str, i: int) -> int | None:
    """Just past the string that opens at text[i] (a quote), or None while it is open."""
    match = _CONTAINER_TOKEN.match(text, i)
    if match is None or not match.group(1):
        return None
    return match.end()


def value_end(text: str, i: int) -> int | None:
    """Just past the JSON value starting at text[i], or None when the text stops inside it.

    A bare scalar (number, true...) counts as open until a delimiter follows it: `12` may yet
    become `123`."""
    if i >= len(text):
        return None
    if text[i] == '"':
        return string_end(text, i)
    if text[i] in "{[":
        return _container_end(text, i)
    j = i
    while j < len(text) and text[j] not in _SCALAR_END:
        j += 1
    return j if j < len(text) else None


def _container_end(text: str, i: int) -> int | None:
    depth = 0
    for match in _CONTAINER_TOKEN.finditer(text, i):
        token = match.group(0)
        if token[0] == '"':
            if not match.group(1):
                return None
            continue
        depth += 1 if token in "{[" else -1
        if depth == 0:
            return match.end()
    return None


def scan_object(text: str, start: int = 0) -> ObjectScan:
    """The keys and value spans of the object that starts at text[start] (after whitespace)."""
    scan = ObjectScan()
    i = skip_whitespace(text, start)
    if i < len(text) and text[i] != "{":
        scan.is_object = False
        return scan
    i += 1
    while True:
        i = skip_whitespace(text, i)
        if i >= len(text):
            return scan
        if text[i] == "}":
            scan.end = i + 1
            return scan
        if text[i] == ",":
            i += 1
            continue
        next_i = _scan_member(text, i, scan)
        if next_i is None:
            return scan
        i = next_i


def _scan_member(text: str, i: int, scan: ObjectScan) -> int | None:
    """Record the `"key": value` at text[i]; where scanning goes on, or None to stop."""
    key_end = string_end(text, i) if text[i] == '"' else None
    if key_end is None:
        return None
    colon = skip_whitespace(text, key_end)
    if colon >= len(text) or text[colon] != ":":
        return None
    value_start = skip_whitespace(text, colon + 1)
    end = value_end(text, value_start)
    scan.values[_key_text(text[i:key_end])] = (value_start, end)
    return end


def _key_text(quoted: str) -> str:
    try:
        key = json.loads(quoted)
    except ValueError:
        return quoted
    return key if isinstance(key, str) else quoted
