"""ResponseEventWriter without a model: text, then a call read by the hermes parser, streamed as
a message item closed before the function_call item opens; an empty generation still has its
message; the items end as the non-streamed answer's (output_items) for the same text."""

from __future__ import annotations

import json
from typing import Any

from engine.server.responses.event_writer import ResponseEventWriter
from engine.server.responses.output import output_items
from engine.tool_calls import HermesToolParser, ToolCallStream
from engine.tool_calls.chat_tools import ToolCalling
from pagedock.protocol.responses import ResponsesRequest, response_shell

TEXT = 'On it. <tool_call>{"name": "set_mode", "arguments": {"mode": "on"}}</tool_call>'


def events_of(sse: list[str]) -> list[dict[str, Any]]:
    events = []
    for block in sse:
        name, data = block.strip().split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


def writer(tools: bool) -> ResponseEventWriter:
    response = response_shell(ResponsesRequest(input="x"), "tiny")
    calls = ToolCallStream(HermesToolParser()) if tools else None
    return ResponseEventWriter(response, calls)


def test_text_then_a_call_close_the_message_before_the_call_opens() -> None:
    w = writer(tools=True)
    sse = [w.lifecycle("response.created")]
    pieces = [TEXT[:10], TEXT[10:40], TEXT[40:]]
    for i, piece in enumerate(pieces):
        sse += w.generated(piece, finished=i == len(pieces) - 1)
    sse += w.finish("completed")
    events = events_of(sse)
    kinds = [e["type"] for e in events]
    first_call = kinds.index("response.function_call_arguments.delta")
    assert kinds.index("response.output_item.done") < first_call
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    message, call = w.response.output
    assert message.type == "message" and message.content[0].text == "On it."
    assert call.type == "function_call" and json.loads(call.arguments) == {"mode": "on"}
    assert (message.status, call.status) == ("completed", "completed")
    unstreamed = output_items(TEXT, ToolCalling(HermesToolParser()), "completed")
    assert [i.type for i in unstreamed] == ["message", "function_call"]
    assert unstreamed[0].content[0].text == message.content[0].text  # type: ignore[union-attr]


def test_an_empty_generation_still_has_its_message() -> None:
    w = writer(tools=False)
    events = events_of(w.generated("", finished=True) + w.finish("incomplete"))
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    [message] = w.response.output
    assert message.status == "incomplete" and message.content[0].text == ""
    assert [i.type for i in output_items("", None, "incomplete")] == ["message"]
