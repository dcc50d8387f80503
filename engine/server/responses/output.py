"""A finished generation as a Response: its output items, its status and its usage.

The output is a `message` with the text outside tool calls (there whenever it has text, or when
there is no call at all), then one `function_call` item per call the tool-call parser read, as
chat's `message.content` and `message.tool_calls` are. A generation cut by max_output_tokens is
`incomplete` (`incomplete_details.reason: max_output_tokens`), as are its items.
"""

from __future__ import annotations

from typing import Literal

from engine.tool_calls.chat_tools import ToolCalling
from pagedock.protocol import UsageInfo
from pagedock.protocol.response_items import (
    FunctionCallItem,
    MessageItem,
    OutputItem,
    OutputTextPart,
    item_id,
)
from pagedock.protocol.responses import (
    IncompleteDetails,
    InputTokensDetails,
    ResponsesResponse,
    ResponseUsage,
)

FinishStatus = Literal["completed", "incomplete"]


def finish_status(finish_reason: str | None) -> FinishStatus:
    return "incomplete" if finish_reason == "length" else "completed"


def output_items(text: str, tools: ToolCalling | None, status: FinishStatus) -> list[OutputItem]:
    """The output of a finished generation whose text is `text`."""
    content, calls = text, []
    if tools is not None:
        message, _ = tools.message(text)
        content, calls = message.content or "", message.tool_calls or []
    items: list[OutputItem] = []
    if content or not calls:
        items.append(output_message(content, status))
    items.extend(
        FunctionCallItem(
            id=item_id("fc"),
            call_id=call.id,
            name=call.function.name,
            arguments=call.function.arguments,
            status=status,
        )
        for call in calls
    )
    return items


def output_message(text: str, status: FinishStatus) -> MessageItem:
    return MessageItem(
        id=item_id("msg"), role="assistant", status=status, content=[OutputTextPart(text=text)]
    )


def response_usage(usage: UsageInfo) -> ResponseUsage:
    """The chat path's usage in the Responses API's names; cached input tokens are the prefix
    cache's hits."""
    details = usage.prompt_tokens_details
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=details.cached_tokens if details else 0
        ),
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
    )


def finish_response(
    response: ResponsesResponse, status: FinishStatus, usage: UsageInfo
) -> ResponsesResponse:
    """`response` (its output in place) marked finished with `status` and `usage`."""
    response.status = status
    response.usage = response_usage(usage)
    if status == "incomplete":
        response.incomplete_details = IncompleteDetails(reason="max_output_tokens")
    return response
