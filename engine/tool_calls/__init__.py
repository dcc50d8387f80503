"""Tool calling, torch-free: reading calls out of generated text (parsers.py, one per model
family's format, and stream.py for streamed deltas) and the schema that guided decoding enforces
for forced calls (schema.py). The server (engine/tool_calls/chat_tools.py) and `LLM.chat` use it."""

from engine.tool_calls.calls import ParsedToolCalls, ToolCall, new_call_id
from engine.tool_calls.parsers import (
    TOOL_CALL_PARSERS,
    HermesToolParser,
    JsonListToolParser,
    Llama3JsonToolParser,
    ToolCallParser,
    get_tool_call_parser,
    parse_tool_calls,
)
from engine.tool_calls.schema import tool_call_schema
from engine.tool_calls.stream import StreamDelta, ToolCallDelta, ToolCallStream

__all__ = [
    "TOOL_CALL_PARSERS",
    "HermesToolParser",
    "JsonListToolParser",
    "Llama3JsonToolParser",
    "ParsedToolCalls",
    "StreamDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallParser",
    "ToolCallStream",
    "get_tool_call_parser",
    "new_call_id",
    "parse_tool_calls",
    "tool_call_schema",
]
