"""What every OpenAI endpoint shares: the base model, ids and timestamps, the error object, the
sampling fields of both generation endpoints, and token usage.

Unknown fields are ignored, as vLLM does; fields OpenAI defines that pagedock does not implement
are declared so that `unsupported_field()` can name them in a clear 400 instead of silently
dropping them.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pagedock.limits import (
    MAX_CACHE_SALT_CHARS,
    MAX_CONTINUATION_TOKENS,
    MAX_INT32,
    MAX_LOGPROBS,
    MAX_N,
    MAX_STOP_STRING_CHARS,
    MAX_STOP_STRINGS,
    MAX_TOKEN_ID_LIST,
    SEED_MAX,
    SEED_MIN,
)

MAX_TOP_LOGPROBS = MAX_LOGPROBS  # the name the protocol's users import

# torch.Generator.manual_seed takes exactly this range; outside it a seed would be a 500.
Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
# Ids beyond int32 are no model's; the engine checks them against its vocabulary.
TokenId = Annotated[int, Field(ge=0, le=MAX_INT32)]
TokenCount = Annotated[int, Field(ge=0, le=MAX_INT32)]
StopString = Annotated[str, Field(max_length=MAX_STOP_STRING_CHARS)]


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


def random_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())


class ErrorInfo(OpenAIModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(OpenAIModel):
    """The body of every error response (pagedock/http/errors.py builds it)."""

    error: ErrorInfo


class StreamOptions(OpenAIModel):
    include_usage: bool = False
    # vLLM's: with include_usage, every chunk also carries the usage so far (GuideLLM asks).
    continuous_usage_stats: bool = False


CONTINUATION_HEADER = "x-pagedock-continuation"
"""The response header of a stream that resumed a continuation (its value: the prior token count).
A replica that does not send it (another engine, which ignores the field) would restart the answer,
so the router does not resume a stream on it."""


HANDOFF_EVENT = ": pagedock-handoff\n\n"
"""What a draining engine sends, in place of the rest and of `data: [DONE]`, on a stream that
would outlive its drain deadline (an SSE comment: clients skip it): a router resumes the stream on
a replica serving the same weights, as a continuation of the token ids relayed so far."""


class Continuation(OpenAIModel):
    """pagedock's extension: resume a stream after tokens generated before, elsewhere (the
    router's in-flight failover, docs/router.md). The tokens count as output, not prompt, and
    the stream carries only what is generated from here on."""

    token_ids: Annotated[list[TokenId], Field(min_length=1, max_length=MAX_CONTINUATION_TOKENS)]


class JsonSchemaFormat(OpenAIModel):
    """response_format.json_schema: the schema the output must validate against."""

    name: str = "response"
    description: str | None = None
    # `schema` would shadow a pydantic BaseModel attribute; the wire name is kept by the alias.
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(OpenAIModel):
    """OpenAI's response_format: text (no constraint), json_object, or json_schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputsFields(OpenAIModel):
    """vLLM's `structured_outputs` extra: exactly one constraint (the engine checks that)."""

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


# vLLM's old guided-decoding fields, removed there in favour of `structured_outputs`: a request
# that still sends one gets a 400 saying so, never a silently unconstrained answer.
REMOVED_GUIDED_FIELDS = (
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "guided_decoding_backend",
    "guided_whitespace_pattern",
)


class SamplingFields(OpenAIModel):
    """What both /v1/completions and /v1/chat/completions take to steer sampling."""

    model: str | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: Seed | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: Annotated[dict[str, float], Field(max_length=MAX_TOKEN_ID_LIST)] | None = None
    user: str | None = None
    # vLLM's extras.
    top_k: Annotated[int, Field(ge=-1, le=MAX_INT32)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0)] = 1.0
    ignore_eos: bool = False
    min_tokens: TokenCount = 0
    stop_token_ids: Annotated[list[TokenId], Field(max_length=MAX_TOKEN_ID_LIST)] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    priority: int = 0
    # vLLM's: prefix-cache blocks are shared only among requests with the same salt
    # (pagedock/kv/block_hash.py); a non-empty string when given.
    cache_salt: Annotated[str, Field(min_length=1, max_length=MAX_CACHE_SALT_CHARS)] | None = None
    # vLLM's: the prompt's token ids and each choice's (each chunk's) generated ids in the response.
    return_token_ids: bool = False
    # vLLM's: each prompt token's log-probability and this many top alternatives per position, in
    # the response's `prompt_logprobs` (not in streams: a stream takes only 0, and gets none).
    prompt_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    continuation: Continuation | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsFields | None = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    guided_decoding_backend: Any = None
    guided_whitespace_pattern: Any = None

    def unsupported_field(self) -> str | None:
        """The first field set that pagedock does not implement, or None."""
        if self.logit_bias:
            return "logit_bias"
        return None

    def unsupported_message(self, field: str) -> str:
        """Why `field` (what unsupported_field named) is refused, for the client."""
        return f"`{field}` is not supported by this server; remove it from the request"

    def removed_guided_field(self) -> str | None:
        """The first of vLLM's removed `guided_*` fields the request sets, or None."""
        return next((f for f in REMOVED_GUIDED_FIELDS if getattr(self, f) is not None), None)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        """vLLM's rule: `continuous_usage_stats` counts only with `include_usage`."""
        options = self.stream_options
        return options is not None and options.include_usage and options.continuous_usage_stats


def response_exclusions(include_usage: bool, return_token_ids: bool) -> dict[str, Any] | None:
    """The fields a response or chunk leaves out: usage unless asked for (chunks), token ids
    unless `return_token_ids`."""
    exclude: dict[str, Any] = {}
    if not include_usage:
        exclude["usage"] = True
    if not return_token_ids:
        exclude["prompt_token_ids"] = True
        exclude["choices"] = {"__all__": {"token_ids"}}
    return exclude or None


class PromptLogprob(OpenAIModel):
    """One entry of a response's `prompt_logprobs` (vLLM's Logprob): -inf reported as -9999."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


PromptLogprobsField = list[dict[int, PromptLogprob] | None]
"""vLLM's `prompt_logprobs`: null for the first prompt token, then {token id: PromptLogprob} per
prompt token, the prompt token first and its position's top alternatives after it."""


class PromptTokensDetails(OpenAIModel):
    cached_tokens: int = 0


class UsageInfo(OpenAIModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
