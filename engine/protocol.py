"""The OpenAI-compatible wire protocol: request and response models of the engine's HTTP API.

Torch-free and engine-free (pydantic only): the router imports these to parse and forward the same
requests. Field names, defaults and response shapes follow OpenAI's API; the extra request fields
vLLM users send (`top_k`, `ignore_eos`, `min_tokens`, ...) are accepted too. Unknown fields are
ignored, as vLLM does; fields OpenAI defines that pagedock does not implement are declared so that
`unsupported_field()` can name them in a clear 400 instead of silently dropping them.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# torch.Generator.manual_seed takes exactly this range; outside it a seed would be a 500.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
MAX_N = 128
MAX_TOP_LOGPROBS = 20

Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


def random_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())


# ---- errors ------------------------------------------------------------------------------------


class ErrorInfo(OpenAIModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(OpenAIModel):
    error: ErrorInfo


# ---- sampling fields shared by both generation endpoints --------------------------------------


class StreamOptions(OpenAIModel):
    include_usage: bool = False


class SamplingFields(OpenAIModel):
    """What both /v1/completions and /v1/chat/completions take to steer sampling."""

    model: str | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM's extras.
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0)] = 1.0
    ignore_eos: bool = False
    min_tokens: Annotated[int, Field(ge=0)] = 0
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    priority: int = 0

    def unsupported_field(self) -> str | None:
        """The first field set that pagedock does not implement, or None."""
        if self.logit_bias:
            return "logit_bias"
        return None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


# ---- /v1/completions --------------------------------------------------------------------------

# A prompt: text, token ids, or a batch of either.
PromptInput = (
    str | list[str] | list[Annotated[int, Field(ge=0)]] | list[list[Annotated[int, Field(ge=0)]]]
)


class CompletionRequest(SamplingFields):
    prompt: PromptInput
    max_tokens: Annotated[int, Field(ge=1)] | None = 16
    echo: bool = False
    logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    best_of: Annotated[int, Field(ge=1, le=MAX_N)] | None = None
    suffix: str | None = None

    def unsupported_field(self) -> str | None:
        if self.suffix:
            return "suffix"
        if self.best_of is not None and self.best_of != self.n:
            return "best_of"
        if self.echo and self.logprobs is not None:
            return "echo"  # echo with logprobs needs prompt logprobs, which the engine lacks
        return super().unsupported_field()


class CompletionLogprobs(OpenAIModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(OpenAIModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class PromptTokensDetails(OpenAIModel):
    cached_tokens: int = 0


class UsageInfo(OpenAIModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionResponse(OpenAIModel):
    """Also the shape of each streamed chunk (`choices` then carry deltas)."""

    id: str = Field(default_factory=lambda: random_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now_s)
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


# ---- /v1/chat/completions ---------------------------------------------------------------------


class ContentPart(OpenAIModel):
    type: str
    text: str | None = None


class ChatMessage(OpenAIModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ResponseFormat(OpenAIModel):
    type: str


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    # vLLM's chat extras.
    add_generation_prompt: bool = True
    echo: bool = False

    def unsupported_field(self) -> str | None:
        checks = {
            "tools": bool(self.tools),
            "tool_choice": self.tool_choice not in (None, "none", "auto"),
            "functions": bool(self.functions),
            "function_call": self.function_call not in (None, "none", "auto"),
            "response_format": self.response_format is not None
            and self.response_format.type != "text",
            "audio": self.audio is not None,
            "modalities": self.modalities is not None and self.modalities != ["text"],
            "prediction": self.prediction is not None,
            "web_search_options": self.web_search_options is not None,
        }
        for name, unsupported in checks.items():
            if unsupported:
                return name
        for i, message in enumerate(self.messages):
            if isinstance(message.content, list) and any(
                p.type != "text" or p.text is None for p in message.content
            ):
                return f"messages[{i}].content"
            if message.tool_calls:
                return f"messages[{i}].tool_calls"
        return super().unsupported_field()

    @property
    def resolved_max_tokens(self) -> int | None:
        """max_completion_tokens is OpenAI's newer name; it wins when both are set."""
        return self.max_completion_tokens or self.max_tokens

    def template_messages(self) -> list[dict[str, str]]:
        return template_messages(self.messages)


def template_messages(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """The messages as a chat template wants them: role and plain-text content."""
    return [{"role": m.role, "content": _message_text(m)} for m in messages]


def _message_text(message: ChatMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    return "".join(p.text or "" for p in message.content)


class TopLogprob(OpenAIModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatChoiceLogprobs(OpenAIModel):
    content: list[ChatTokenLogprob] | None = None


class ChatResponseMessage(OpenAIModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None


class ChatChoice(OpenAIModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(OpenAIModel):
    id: str = Field(default_factory=lambda: random_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now_s)
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: UsageInfo


class DeltaMessage(OpenAIModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(OpenAIModel):
    index: int
    delta: DeltaMessage
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionChunk(OpenAIModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None


# ---- models, tokenizer, version ---------------------------------------------------------------


class ModelCard(OpenAIModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now_s)
    owned_by: str = "pagedock"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(OpenAIModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeRequest(OpenAIModel):
    """vLLM's /tokenize: either a prompt, or chat messages (the chat template is applied)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class TokenizeResponse(OpenAIModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(OpenAIModel):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


class DetokenizeResponse(OpenAIModel):
    prompt: str


class VersionResponse(OpenAIModel):
    version: str


# ---- GET /v1/kv/events (NDJSON lines) ---------------------------------------------------------


class KVEventWire(OpenAIModel):
    type: Literal["stored", "removed", "cleared"]
    block_hashes: list[str] = Field(default_factory=list)
    parent_block_hash: str | None = None


class KVSnapshotMessage(OpenAIModel):
    """First line of the stream, and again after the consumer fell behind: every cached hash."""

    type: Literal["snapshot"] = "snapshot"
    instance_id: str
    seq: int
    block_size: int
    block_hashes: list[str]
    root_hash: str | None = None
    """h_0 of the engine's hash chains (hex): a router hashes prompts from it, so both agree."""


class KVBatchMessage(OpenAIModel):
    """One engine step's cache changes; `seq` follows the snapshot's without gaps."""

    type: Literal["batch"] = "batch"
    instance_id: str
    seq: int
    events: list[KVEventWire]


class KVHeartbeatMessage(OpenAIModel):
    """Sent when nothing else was for a while, so a consumer can tell a quiet engine from a dead
    connection."""

    type: Literal["heartbeat"] = "heartbeat"
    instance_id: str
    seq: int
