"""POST /v1/embeddings: the request (OpenAI's fields and vLLM's extras) and the response.

`input` is a completions prompt's four shapes (a text, token ids, or a batch of either); each entry
is one embedding, `data[i]` for entry i. `encoding_format` base64 is each vector's float32 values,
little-endian, in base64 (what OpenAI sends and its clients decode; the `openai` Python client
asks for it by default). `dimensions` keeps the first values of a Matryoshka model's vector (a
400 for any other model, as vLLM answers). vLLM's extras: `truncate_prompt_tokens`,
`add_special_tokens`, `normalize`, `priority`; `cache_salt` as on the generation endpoints; and
pagedock's `pooling_type` (LAST, MEAN, CLS: vLLM sets it per model, pagedock per request too).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pagedock.limits import MAX_CACHE_SALT_CHARS, MAX_INT32
from pagedock.protocol.openai import OpenAIModel, now_s, random_id
from pagedock.protocol.prompt_input import PromptInput


class EmbeddingRequest(OpenAIModel):
    model: str | None = None
    input: PromptInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1, le=MAX_INT32)] | None = None
    user: str | None = None
    # vLLM's extras.
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=MAX_INT32)] | None = None
    """Keep each input's last k tokens (-1: the context length) instead of refusing it."""
    add_special_tokens: bool = True
    """Add the tokens the model's tokenizer adds to a text (its BOS)."""
    normalize: bool | None = None
    """Scale each vector to unit L2 norm; None: the model's default (yes)."""
    priority: int = 0
    cache_salt: Annotated[str, Field(min_length=1, max_length=MAX_CACHE_SALT_CHARS)] | None = None
    # pagedock's.
    pooling_type: str | None = None
    """LAST, MEAN or CLS; None: the model's default (LAST for a generative model)."""


class EmbeddingData(OpenAIModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str
    """The values, or with encoding_format base64 their float32 bytes in base64."""


class EmbeddingUsage(OpenAIModel):
    prompt_tokens: int = 0
    total_tokens: int = 0


class EmbeddingResponse(OpenAIModel):
    id: str = Field(default_factory=lambda: random_id("embd"))
    object: Literal["list"] = "list"
    created: int = Field(default_factory=now_s)
    model: str
    data: list[EmbeddingData]
    usage: EmbeddingUsage
