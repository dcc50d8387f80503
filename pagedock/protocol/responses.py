"""POST /v1/responses (OpenAI's Responses API): the request, the Response object and its usage.

The conversation's items are pagedock/protocol/response_items.py's; the request as the chat path
reads it, pagedock/protocol/response_chat.py's; the streamed events, response_events.py's.
`output_text` is the SDKs' convenience (the output messages' text joined), not a field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from pagedock.limits import MAX_CACHE_SALT_CHARS, MAX_STOP_STRINGS
from pagedock.protocol.openai import (
    MAX_INT32,
    OpenAIModel,
    Penalty,
    Seed,
    StopString,
    now_s,
)
from pagedock.protocol.response_items import ItemId, OutputItem, item_id

MAX_METADATA_PAIRS = 16
Metadata = Annotated[
    dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
    Field(max_length=MAX_METADATA_PAIRS),
]
ResponseStatus = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
# Values of fields pagedock does not implement that mean "nothing asked": accepted, as clients
# (the Agents SDK, coding agents) send them by default.
_NEUTRAL_SERVICE_TIERS = (None, "auto", "default")


class PlainTextFormat(OpenAIModel):
    type: Literal["text"] = "text"


class JsonObjectFormat(OpenAIModel):
    type: Literal["json_object"]


class JsonSchemaTextFormat(OpenAIModel):
    type: Literal["json_schema"]
    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: str | None = None
    # `schema` would shadow a pydantic BaseModel attribute; the wire name is kept by the alias.
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


TextFormat = Annotated[
    PlainTextFormat | JsonObjectFormat | JsonSchemaTextFormat, Field(discriminator="type")
]


class TextConfig(OpenAIModel):
    """`text`: the output's format (plain text, any JSON object, or a JSON schema)."""

    format: TextFormat = Field(default_factory=PlainTextFormat)
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(OpenAIModel):
    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    """A system message before the conversation; never carried over to a follow-up."""
    previous_response_id: ItemId | None = None
    store: bool = True
    stream: bool = False
    max_output_tokens: Annotated[int, Field(ge=1, le=MAX_INT32)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    text: TextConfig | None = None
    tools: list[dict[str, Any]] | None = None
    """Function tools in the Responses shape: {type: function, name, description, parameters,
    strict}."""
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    metadata: Metadata | None = None
    user: str | None = None
    # Accepted and ignored: billing, abuse and cache-routing hints (pagedock's prefix cache is
    # automatic).
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    stream_options: dict[str, Any] | None = None
    # vLLM's extras, as on the chat endpoint.
    top_k: Annotated[int, Field(ge=-1, le=MAX_INT32)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0)] = 1.0
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    seed: Seed | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = None
    priority: int = 0
    cache_salt: Annotated[str, Field(min_length=1, max_length=MAX_CACHE_SALT_CHARS)] | None = None
    # OpenAI's fields that pagedock does not implement: declared so that unsupported_field()
    # names them in a 400.
    background: bool | None = None
    conversation: Any = None
    include: list[Any] | None = None
    max_tool_calls: Any = None
    prompt: Any = None
    reasoning: dict[str, Any] | None = None
    top_logprobs: Any = None
    truncation: str | None = None

    def unsupported_field(self) -> str | None:
        """The first field set that pagedock does not implement, or None."""
        checks = {
            "background": bool(self.background),
            "conversation": self.conversation is not None,
            "include": bool(self.include),
            "max_tool_calls": self.max_tool_calls is not None,
            "prompt": self.prompt is not None,
            "reasoning": any(v is not None for v in (self.reasoning or {}).values()),
            "top_logprobs": self.top_logprobs not in (None, 0),
            "truncation": self.truncation not in (None, "disabled"),
            "service_tier": self.service_tier not in _NEUTRAL_SERVICE_TIERS,
            "text.verbosity": self.text is not None and self.text.verbosity not in (None, "medium"),
        }
        return next((name for name, unsupported in checks.items() if unsupported), None)


class InputTokensDetails(OpenAIModel):
    cached_tokens: int = 0


class OutputTokensDetails(OpenAIModel):
    reasoning_tokens: int = 0


class ResponseUsage(OpenAIModel):
    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0


class IncompleteDetails(OpenAIModel):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseError(OpenAIModel):
    code: str
    message: str


class ResponsesResponse(OpenAIModel):
    """The Response object: what POST answers (or `response.completed` carries) and GET returns.
    `id` and `previous_response_id` are top-level, for routers that key a conversation on them."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    usage: ResponseUsage | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float
    top_p: float
    text: TextConfig = Field(default_factory=TextConfig)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    metadata: dict[str, str] = Field(default_factory=dict)
    store: bool = True
    background: bool = False
    truncation: Literal["disabled"] = "disabled"
    user: str | None = None

    def to_json(self) -> str:
        """The wire form (aliases: `text.format.schema`)."""
        return self.model_dump_json(by_alias=True)


def response_shell(body: ResponsesRequest, model: str) -> ResponsesResponse:
    """A new response to `body`, in progress and without output: the request's settings echoed
    as OpenAI echoes them (the sampling defaults made explicit)."""
    return ResponsesResponse(
        id=item_id("resp"),
        created_at=now_s(),
        status="in_progress",
        model=model,
        previous_response_id=body.previous_response_id,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        text=body.text or TextConfig(),
        tools=body.tools or [],
        tool_choice=body.tool_choice or "auto",
        parallel_tool_calls=True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        metadata=body.metadata or {},
        store=body.store,
        user=body.user,
    )


class DeletedResponse(OpenAIModel):
    """DELETE /v1/responses/{id}."""

    id: str
    object: Literal["response"] = "response"
    deleted: bool = True
