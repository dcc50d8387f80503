"""ToolCallStream: a growing generated text, turned into the pieces of OpenAI's streamed deltas.

Each call is announced once (index, id, function name), then its arguments follow as fragments
of their raw text. The content and every call's arguments only ever grow, so the fragments
concatenate to exactly the content and calls that `parser.extract` reads from the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.tool_calls.calls import new_call_id
from engine.tool_calls.parsers import ToolCallParser


@dataclass
class ToolCallDelta:
    """One call's piece of a delta: `id` and `name` the first time, then argument fragments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class StreamDelta:
    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


@dataclass
class _SentCall:
    id: str
    arguments: str = ""


class ToolCallStream:
    """What has been sent of one choice's text, and what to send next."""

    def __init__(self, parser: ToolCallParser) -> None:
        self._parser = parser
        self._text = ""
        self._content = ""
        self._calls: list[_SentCall] = []
        self.num_final_calls: int | None = None
        """The calls of the whole output, once finished (0 when it holds none or a bad one)."""

    @property
    def called(self) -> bool:
        """Whether any call has been announced."""
        return bool(self._calls)

    def feed(self, text: str) -> StreamDelta:
        """The delta for `text`, newly generated."""
        self._text += text
        scan = self._parser.scan(self._text, final=False)
        return self._advance(scan.content, [(c.name, c.arguments) for c in scan.calls])

    def finish(self) -> StreamDelta:
        """The rest, once the output is finished: held-back text, the calls' final arguments."""
        parsed = self._parser.extract(self._text)
        self.num_final_calls = len(parsed.calls)
        return self._advance(parsed.content or "", [(c.name, c.arguments) for c in parsed.calls])

    def _advance(self, content: str, calls: list[tuple[str | None, str]]) -> StreamDelta:
        delta = StreamDelta()
        if content.startswith(self._content):
            delta.content = content[len(self._content) :]
            self._content = content
        for index, (name, arguments) in enumerate(calls):
            if name is None:
                break  # a call is announced by name, and calls in order
            piece = self._call_piece(index, name, arguments)
            if piece is not None:
                delta.tool_calls.append(piece)
        return delta

    def _call_piece(self, index: int, name: str, arguments: str) -> ToolCallDelta | None:
        piece = None
        if index == len(self._calls):
            self._calls.append(_SentCall(new_call_id()))
            piece = ToolCallDelta(index, self._calls[index].id, name)
        if index >= len(self._calls):
            return None
        sent = self._calls[index]
        if len(arguments) > len(sent.arguments) and arguments.startswith(sent.arguments):
            piece = piece or ToolCallDelta(index)
            piece.arguments = arguments[len(sent.arguments) :]
            sent.arguments = arguments
        return piece
