"""Tool calling in /v1/chat/completions, with vLLM's semantics:

    tool_choice  none      tools are rendered, nothing is parsed
                 auto      the --tool-call-parser reads calls out of free text; needs
                           --enable-auto-tool-choice (else a 400, as vLLM answers)
                 required  guided decoding forces a JSON list of calls to the tools (one call
                           unless parallel_tool_calls)
                 named     the same, exactly one call, to the named function

A choice whose text holds calls answers them as `message.tool_calls` (content: the text around
them, or null) with finish_reason `tool_calls`; streamed, as `delta.tool_calls`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.inputs.sampling_params import SamplingParams, StructuredOutputsParams
from engine.tool_calls import (
    JsonListToolParser,
    StreamDelta,
    ToolCallParser,
    ToolCallStream,
    get_tool_call_parser,
    tool_call_schema,
)
from pagedock.errors import InvalidRequestError
from pagedock.protocol import ChatCompletionRequest, ChatResponseMessage, DeltaMessage
from pagedock.protocol.tools import (
    DeltaFunctionCall,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    ToolRequest,
)

if TYPE_CHECKING:
    from engine.server.openai.context import ServerOptions

TOOL_CALLS = "tool_calls"


@dataclass
class ToolCalling:
    """How one request's tool calls are produced and read back."""

    parser: ToolCallParser
    schema: dict[str, Any] | None = None
    """The JSON schema guided decoding enforces (forced calls); None for `auto`."""

    def guide(self, params: SamplingParams) -> SamplingParams:
        """`params` with the forced call's schema as its structured output."""
        if self.schema is None:
            return params
        if params.structured_outputs is not None:
            raise InvalidRequestError(
                "tool_choice required or a named function is enforced with structured outputs; "
                "it cannot be combined with response_format or structured_outputs",
                "tool_choice",
            )
        try:
            guided = StructuredOutputsParams(json=self.schema)
        except InvalidRequestError as e:  # the tools' parameters: name them, not the field
            raise InvalidRequestError(f"the forced tool call's schema: {e}", "tools") from None
        return replace(params, structured_outputs=guided)

    def message(self, text: str, echo: str = "") -> tuple[ChatResponseMessage, bool]:
        """A finished choice's message, and whether it calls tools."""
        parsed = self.parser.extract(text)
        if not parsed.calls:
            return ChatResponseMessage(content=echo + text), False
        calls = [
            ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
            for c in parsed.calls
        ]
        content = echo + (parsed.content or "")
        return ChatResponseMessage(content=content or None, tool_calls=calls), True


def plan_tool_calling(options: ServerOptions, body: ChatCompletionRequest) -> ToolCalling | None:
    """What the request's tools ask of generation; None when nothing is to be parsed. 400s for
    bad tools or tool_choice, and for `auto` on a server that does not enable it."""
    request = body.tool_request()
    if request is None or request.mode == "none":
        return None
    if request.mode == "auto":
        return _auto(options)
    return ToolCalling(JsonListToolParser(), _forced_schema(request))


def _auto(options: ServerOptions) -> ToolCalling:
    if not (options.enable_auto_tool_choice and options.tool_call_parser):
        raise InvalidRequestError(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be '
            'set on the server (send tool_choice "none", "required" or a named function instead)',
            "tool_choice",
        )
    return ToolCalling(get_tool_call_parser(options.tool_call_parser))


def _forced_schema(request: ToolRequest) -> dict[str, Any]:
    # A named function is called once, as OpenAI and vLLM answer it; `required` may call several
    # tools unless parallel_tool_calls is false.
    parallel = request.parallel_tool_calls and request.mode == "required"
    return tool_call_schema(request.tools, request.function_name, parallel)


class ToolDeltas:
    """The streamed deltas of one request's choices, tool calls read out as they grow."""

    def __init__(self, calling: ToolCalling, prior_text: str = "") -> None:
        """`prior_text`: what a continuation's choice generated before, whose deltas its client
        has had (the deltas depend on the text only, so they are rebuilt and not sent again)."""
        self._calling = calling
        self._prior_text = prior_text
        self._streams: dict[int, ToolCallStream] = {}
        self._called: set[int] = set()

    def delta(self, index: int, text: str, finished: bool) -> DeltaMessage:
        stream = self._streams.get(index)
        if stream is None:
            stream = self._streams[index] = ToolCallStream(self._calling.parser)
            stream.feed(self._prior_text)
        piece = stream.feed(text)
        if finished:
            rest = stream.finish()
            piece = StreamDelta(piece.content + rest.content, piece.tool_calls + rest.tool_calls)
            if stream.num_final_calls:
                self._called.add(index)
        return DeltaMessage(content=piece.content or None, tool_calls=_wire(piece) or None)

    def finish_reason(self, index: int, finish_reason: str | None) -> str | None:
        return TOOL_CALLS if finish_reason is not None and index in self._called else finish_reason


def _wire(piece: StreamDelta) -> list[DeltaToolCall]:
    return [
        DeltaToolCall(
            index=c.index,
            id=c.id,
            type="function" if c.id else None,
            function=DeltaFunctionCall(name=c.name, arguments=c.arguments),
        )
        for c in piece.tool_calls
    ]
