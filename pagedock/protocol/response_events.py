"""The server-sent events of a streamed Responses API answer (`stream: true`), in OpenAI's order:

    response.created, response.in_progress                    the response, without output yet
    per output item (a message, or a function call):
      response.output_item.added
      message:  response.content_part.added, response.output_text.delta ...,
                response.output_text.done, response.content_part.done
      function_call:  response.function_call_arguments.delta ..., .done
      response.output_item.done
    response.completed | response.incomplete (max_output_tokens reached) | response.failed

Each is an SSE `event: <type>` with `data: <json>`, numbered by `sequence_number` from 0; a
failure after the 200 is an `error` event, then `response.failed`. No `[DONE]` follows (OpenAI
sends none).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pagedock.protocol.openai import OpenAIModel
from pagedock.protocol.response_items import OutputItem, OutputTextPart
from pagedock.protocol.responses import ResponsesResponse


class ResponseLifecycleEvent(OpenAIModel):
    type: Literal[
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ]
    sequence_number: int
    response: ResponsesResponse


class OutputItemEvent(OpenAIModel):
    type: Literal["response.output_item.added", "response.output_item.done"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartEvent(OpenAIModel):
    type: Literal["response.content_part.added", "response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputTextPart


class OutputTextDeltaEvent(OpenAIModel):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[dict[str, Any]] = Field(default_factory=list)


class OutputTextDoneEvent(OpenAIModel):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[dict[str, Any]] = Field(default_factory=list)


class FunctionCallArgumentsDeltaEvent(OpenAIModel):
    type: Literal["response.function_call_arguments.delta"] = (
        "response.function_call_arguments.delta"
    )
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDoneEvent(OpenAIModel):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    sequence_number: int
    item_id: str
    output_index: int
    arguments: str


class ErrorEvent(OpenAIModel):
    type: Literal["error"] = "error"
    sequence_number: int
    code: str | None = None
    message: str
    param: str | None = None


ResponseStreamEvent = (
    ResponseLifecycleEvent
    | OutputItemEvent
    | ContentPartEvent
    | OutputTextDeltaEvent
    | OutputTextDoneEvent
    | FunctionCallArgumentsDeltaEvent
    | FunctionCallArgumentsDoneEvent
    | ErrorEvent
)


def sse_event(event: ResponseStreamEvent) -> str:
    """One event on the wire: its type as the SSE event name, its JSON as the data."""
    return f"event: {event.type}\ndata: {event.model_dump_json(by_alias=True)}\n\n"
