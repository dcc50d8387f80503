"""The OpenAI-compatible wire protocol: request and response models of the engine's HTTP API.

Torch-free and engine-free (pydantic only): the router imports these to parse and forward the same
requests. Field names, defaults and response shapes follow OpenAI's API; the extra request fields
vLLM users send (`top_k`, `ignore_eos`, `min_tokens`, ...) are accepted too.

    openai.py       base model, error object, sampling fields, usage
    completions.py  /v1/completions          chat.py      /v1/chat/completions
    tokenize.py     /tokenize, /detokenize   models.py    /v1/models, /version
    kv_events.py    /v1/kv/events lines
    errors.py       errors in OpenAI's shape (FastAPI)  auth.py  the API-key guard (FastAPI)

The models are re-exported here; errors.py and auth.py are imported by name (they need FastAPI,
which a client of the models alone does not).
"""

from engine.protocol.chat import (
    ChatChoice,
    ChatChoiceLogprobs,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    ChatResponseMessage,
    ChatTokenLogprob,
    ContentPart,
    Conversation,
    DeltaMessage,
    ResponseFormat,
    TopLogprob,
    template_messages,
)
from engine.protocol.completions import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    PromptInput,
)
from engine.protocol.kv_events import (
    KVBatchMessage,
    KVEventWire,
    KVHeartbeatMessage,
    KVSnapshotMessage,
)
from engine.protocol.models import ModelCard, ModelList, VersionResponse
from engine.protocol.openai import (
    CONTINUATION_HEADER,
    MAX_N,
    MAX_TOP_LOGPROBS,
    SEED_MAX,
    SEED_MIN,
    Continuation,
    ErrorInfo,
    ErrorResponse,
    OpenAIModel,
    Penalty,
    PromptTokensDetails,
    SamplingFields,
    Seed,
    StreamOptions,
    UsageInfo,
    now_s,
    random_id,
    response_exclusions,
)
from engine.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

__all__ = [
    "CONTINUATION_HEADER",
    "MAX_N",
    "MAX_TOP_LOGPROBS",
    "SEED_MAX",
    "SEED_MIN",
    "ChatChoice",
    "ChatChoiceLogprobs",
    "ChatChunkChoice",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatMessage",
    "ChatResponseMessage",
    "ChatTokenLogprob",
    "CompletionChoice",
    "CompletionLogprobs",
    "CompletionRequest",
    "CompletionResponse",
    "ContentPart",
    "Continuation",
    "Conversation",
    "DeltaMessage",
    "DetokenizeRequest",
    "DetokenizeResponse",
    "ErrorInfo",
    "ErrorResponse",
    "KVBatchMessage",
    "KVEventWire",
    "KVHeartbeatMessage",
    "KVSnapshotMessage",
    "ModelCard",
    "ModelList",
    "OpenAIModel",
    "Penalty",
    "PromptInput",
    "PromptTokensDetails",
    "ResponseFormat",
    "SamplingFields",
    "Seed",
    "StreamOptions",
    "TokenizeRequest",
    "TokenizeResponse",
    "TopLogprob",
    "UsageInfo",
    "VersionResponse",
    "now_s",
    "random_id",
    "response_exclusions",
    "template_messages",
]
