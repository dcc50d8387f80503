"""ResponseEventWriter: the numbered events of one streamed response, and the output items they
build (pagedock/protocol/response_events.py has the order).

Generated text arrives as deltas; with tools, the tool-call parser's stream (the chat path's)
splits it into content and calls as it grows. Content goes to an output message (opened at its
first text), each call to a function_call item (opened when the call is announced; a call closes
the message before it). Every event is serialized when made, so it carries the item as it was
then. The items end as the non-streamed answer's do: output_items() reads the same text.
"""

from __future__ import annotations

from typing import TypeVar

from engine.server.responses.output import FinishStatus
from engine.tool_calls import StreamDelta, ToolCallStream
from engine.tool_calls.stream import ToolCallDelta
from pagedock.http.errors import APIError
from pagedock.protocol.response_events import (
    ContentPartEvent,
    ErrorEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItemEvent,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    ResponseLifecycleEvent,
    sse_event,
)
from pagedock.protocol.response_items import (
    FunctionCallItem,
    MessageItem,
    OutputTextPart,
    item_id,
)
from pagedock.protocol.responses import ResponseError, ResponsesResponse

Event = TypeVar(
    "Event",
    ResponseLifecycleEvent,
    OutputItemEvent,
    ContentPartEvent,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    ErrorEvent,
)


class ResponseEventWriter:
    def __init__(self, response: ResponsesResponse, calls: ToolCallStream | None) -> None:
        self.response = response
        """The response the events describe; its output grows as they are made."""
        self._calls = calls
        self._sequence_number = 0
        self._message_index: int | None = None
        """The output index of the message being written; None when none is open."""
        self._call_indexes: dict[int, int] = {}
        """The output index of each call, by its index among the calls."""

    def lifecycle(self, kind: str) -> str:
        """response.created, .in_progress, .completed, .incomplete or .failed."""
        return self._event(ResponseLifecycleEvent, type=kind, response=self.response)

    def generated(self, text: str, finished: bool) -> list[str]:
        """The events for newly generated `text` (and, once finished, for what the tool-call
        parser held back)."""
        if self._calls is None:
            return self._text(text)
        piece = self._calls.feed(text)
        if finished:
            rest = self._calls.finish()
            piece = StreamDelta(piece.content + rest.content, piece.tool_calls + rest.tool_calls)
        events = self._text(piece.content)
        for call in piece.tool_calls:
            events += self._call(call)
        return events

    def finish(self, status: FinishStatus) -> list[str]:
        """Every open item closed with `status` (an empty message first when there is no
        output at all, as the non-streamed answer has)."""
        events = self._open_message() if not self.response.output else []
        events += self._close_message(status)
        for index in self._call_indexes.values():
            call = self.response.output[index]
            assert isinstance(call, FunctionCallItem)
            call.status = status
            events.append(
                self._event(
                    FunctionCallArgumentsDoneEvent,
                    item_id=call.id,
                    output_index=index,
                    arguments=call.arguments,
                )
            )
            events.append(self._item_event("response.output_item.done", index))
        self._call_indexes = {}
        return events

    def failed(self, error: APIError) -> list[str]:
        """An error event, then response.failed with the error."""
        code = error.code or ("server_error" if error.status_code >= 500 else "invalid_request")
        self.response.status = "failed"
        self.response.error = ResponseError(code=code, message=error.message)
        event = self._event(ErrorEvent, code=code, message=error.message, param=error.param)
        return [event, self.lifecycle("response.failed")]

    # ---- items ---------------------------------------------------------------------------------

    def _text(self, text: str) -> list[str]:
        if not text:
            return []
        events = self._open_message() if self._message_index is None else []
        index = self._message_index
        assert index is not None
        message = self.response.output[index]
        assert isinstance(message, MessageItem)
        message.content[0].text += text
        events.append(
            self._event(
                OutputTextDeltaEvent,
                item_id=message.id,
                output_index=index,
                content_index=0,
                delta=text,
            )
        )
        return events

    def _open_message(self) -> list[str]:
        message = MessageItem(id=item_id("msg"), role="assistant", status="in_progress", content=[])
        self._message_index = index = len(self.response.output)
        self.response.output.append(message)
        events = [self._item_event("response.output_item.added", index)]
        message.content.append(OutputTextPart(text=""))
        events.append(self._part_event("response.content_part.added", index))
        return events

    def _close_message(self, status: FinishStatus) -> list[str]:
        index = self._message_index
        if index is None:
            return []
        self._message_index = None
        message = self.response.output[index]
        assert isinstance(message, MessageItem)
        message.status = status
        text = message.content[0].text
        done = self._event(
            OutputTextDoneEvent, item_id=message.id, output_index=index, content_index=0, text=text
        )
        return [
            done,
            self._part_event("response.content_part.done", index),
            self._item_event("response.output_item.done", index),
        ]

    def _call(self, piece: ToolCallDelta) -> list[str]:
        events = []
        if piece.id is not None:  # announced: a new item, after the message it ends
            events += self._close_message("completed")
            call = FunctionCallItem(
                id=item_id("fc"),
                call_id=piece.id,
                name=piece.name or "",
                arguments="",
                status="in_progress",
            )
            self._call_indexes[piece.index] = index = len(self.response.output)
            self.response.output.append(call)
            events.append(self._item_event("response.output_item.added", index))
        index = self._call_indexes[piece.index]
        item = self.response.output[index]
        assert isinstance(item, FunctionCallItem)
        if piece.arguments:
            item.arguments += piece.arguments
            events.append(
                self._event(
                    FunctionCallArgumentsDeltaEvent,
                    item_id=item.id,
                    output_index=index,
                    delta=piece.arguments,
                )
            )
        return events

    # ---- events --------------------------------------------------------------------------------

    def _item_event(self, kind: str, index: int) -> str:
        item = self.response.output[index]
        return self._event(OutputItemEvent, type=kind, output_index=index, item=item)

    def _part_event(self, kind: str, index: int) -> str:
        message = self.response.output[index]
        assert isinstance(message, MessageItem)
        part = message.content[0]
        return self._event(
            ContentPartEvent,
            type=kind,
            item_id=message.id,
            output_index=index,
            content_index=0,
            part=part,
        )

    def _event(self, cls: type[Event], **fields: object) -> str:
        event = cls.model_validate({**fields, "sequence_number": self._sequence_number})
        self._sequence_number += 1
        return sse_event(event)
