"""The OpenAI-compatible wire protocol: request and response models of the engine's HTTP API.

Torch-free: pydantic, pagedock/limits.py and pagedock/errors.py only (the 400 that the tools and
messages checks raise). The router imports these to parse and forward the same requests. Field
names, defaults and response shapes follow OpenAI's API; the extra request fields vLLM users send
(`top_k`, `ignore_eos`, `min_tokens`, ...) are accepted too.

    openai.py       base model, error object, sampling fields, usage
    completions.py  /v1/completions          chat.py      /v1/chat/completions
    tokenize.py     /tokenize, /detokenize   models.py    /v1/models, /version
    render.py       /v1/.../render           tools.py     tools, tool_choice, tool calls
    lora.py         /v1/load_lora_adapter, /v1/unload_lora_adapter
    embeddings.py   /v1/embeddings
    responses.py    /v1/responses: the request and the Response object; its items, events
                    and chat form in response_items.py, response_events.py, response_chat.py

The models are re-exported here. The KV event streams' wire formats are in pagedock/kv/, and the
HTTP pieces that need FastAPI (errors in OpenAI's shape, the API-key guard, limits) in
pagedock/http/.
"""

from pagedock.protocol.chat import (
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
    TopLogprob,
    template_messages,
)
from pagedock.protocol.completions import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
)
from pagedock.protocol.embeddings import (
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    EmbeddingUsage,
)
from pagedock.protocol.lora import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest
from pagedock.protocol.models import ModelCard, ModelList, VersionResponse
from pagedock.protocol.openai import (
    CONTINUATION_HEADER,
    MAX_N,
    MAX_TOP_LOGPROBS,
    SEED_MAX,
    SEED_MIN,
    Continuation,
    ErrorInfo,
    ErrorResponse,
    JsonSchemaFormat,
    OpenAIModel,
    Penalty,
    PromptTokensDetails,
    ResponseFormat,
    SamplingFields,
    Seed,
    StreamOptions,
    StructuredOutputsFields,
    UsageInfo,
    now_s,
    random_id,
    response_exclusions,
)
from pagedock.protocol.prompt_input import PromptInput
from pagedock.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from pagedock.protocol.tools import (
    DeltaFunctionCall,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    ToolRequest,
    read_tool_request,
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
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaToolCall",
    "DetokenizeRequest",
    "DetokenizeResponse",
    "EmbeddingData",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "ErrorInfo",
    "ErrorResponse",
    "FunctionCall",
    "JsonSchemaFormat",
    "LoadLoRAAdapterRequest",
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
    "StructuredOutputsFields",
    "TokenizeRequest",
    "TokenizeResponse",
    "ToolCall",
    "ToolRequest",
    "TopLogprob",
    "UnloadLoRAAdapterRequest",
    "UsageInfo",
    "VersionResponse",
    "now_s",
    "random_id",
    "read_tool_request",
    "response_exclusions",
    "template_messages",
]
