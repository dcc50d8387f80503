"""engine/tool_calls/stream.py: streamed tool-call deltas reassemble to the non-streamed calls,
however the text is split."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.tool_calls import (
    HermesToolParser,
    JsonListToolParser,
    Llama3JsonToolParser,
    StreamDelta,
    ToolCallParser,
    ToolCallStream,
)

HERMES = (
    "I will check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2], "note": "a}\\"b"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)
LLAMA3 = '<|python_tag|>{"name": "a", "parameters": {"x": 1.5}}; {"name": "b", "parameters": {}}'
JSON_LIST = '[{"name": "a", "arguments": {"q": "x, y"}}, {"name": "b", "arguments": {"n": 10}}]'
CASES = [
    (HermesToolParser(), HERMES),
    (Llama3JsonToolParser(), LLAMA3),
    (JsonListToolParser(), JSON_LIST),
    (HermesToolParser(), "No tools needed: <tool is not a tag> 42."),
    (Llama3JsonToolParser(), "Plain answer."),
]


@dataclass
class Reassembled:
    content: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)

    def add(self, delta: StreamDelta) -> None:
        self.content += delta.content
        for piece in delta.tool_calls:
            if piece.index not in self.calls:
                assert piece.id is not None and piece.name is not None, "a call starts with id+name"
                self.calls[piece.index] = {"id": piece.id, "name": piece.name, "arguments": ""}
            else:
                assert piece.id is None and piece.name is None, "id and name are sent once"
            self.calls[piece.index]["arguments"] += piece.arguments


def stream_in_pieces(parser: ToolCallParser, text: str, cuts: list[int]) -> Reassembled:
    stream = ToolCallStream(parser)
    result = Reassembled()
    bounds = [0, *sorted(set(cuts)), len(text)]
    for start, end in itertools.pairwise(bounds):
        result.add(stream.feed(text[start:end]))
    result.add(stream.finish())
    return result


def assert_same_as_whole(parser: ToolCallParser, text: str, result: Reassembled) -> None:
    whole = parser.extract(text)
    assert result.content == (whole.content or "")
    assert [(c["name"], c["arguments"]) for c in result.calls.values()] == [
        (c.name, c.arguments) for c in whole.calls
    ]


@pytest.mark.parametrize(("parser", "text"), CASES)
def test_a_character_at_a_time_reassembles_to_the_whole_outputs_calls(
    parser: ToolCallParser, text: str
) -> None:
    result = stream_in_pieces(parser, text, list(range(1, len(text))))
    assert_same_as_whole(parser, text, result)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_split_reassembles_to_the_whole_outputs_calls(data: st.DataObject) -> None:
    parser, text = data.draw(st.sampled_from(CASES))
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))
    assert_same_as_whole(parser, text, stream_in_pieces(parser, text, cuts))


def test_text_before_a_call_streams_as_content_before_the_call_is_complete() -> None:
    stream = ToolCallStream(HermesToolParser())
    assert stream.feed("Checking the weather").content == "Checking the weather"
    assert stream.feed(" now <tool_").content == " now"  # the tag start is held back
    delta = stream.feed('call>{"name": "get_weather", "arguments": {"ci')
    assert delta.content == ""
    [piece] = delta.tool_calls
    assert (piece.index, piece.name, piece.arguments) == (0, "get_weather", '{"ci')
    assert piece.id is not None and piece.id.startswith("call_")
    [more] = stream.feed('ty": "Paris"}}</tool_call>').tool_calls
    assert (more.id, more.name, more.arguments) == (None, None, 'ty": "Paris"}')
    final = stream.finish()
    assert final.content == "" and final.tool_calls == [] and stream.num_final_calls == 1


def test_a_call_is_announced_only_once_its_name_is_complete() -> None:
    stream = ToolCallStream(JsonListToolParser())
    assert stream.feed('[{"name": "get_wea').tool_calls == []
    [piece] = stream.feed('ther", "arguments": {').tool_calls
    assert piece.name == "get_weather" and piece.arguments == "{"


def test_a_malformed_call_ends_the_stream_with_the_whole_text_as_content() -> None:
    text = 'Sure <tool_call>{"name": "f", "arguments": {"x": }</tool_call>'
    stream = ToolCallStream(HermesToolParser())
    content = "".join(stream.feed(piece).content for piece in (text[:5], text[5:30], text[30:]))
    content += stream.finish().content
    assert content == text  # as the non-streamed response's content
    assert stream.num_final_calls == 0  # so its finish_reason is not tool_calls
