"""POST /v1/completions/render and /v1/chat/completions/render (vLLM's): a request rendered to the
token ids the engine would run, without running the model, in vLLM's GenerateRequest shape."""

from __future__ import annotations

from typing import Any

from pagedock.protocol.openai import OpenAIModel


class RenderedRequest(OpenAIModel):
    """One prompt as the engine would run it (vLLM's GenerateRequest, text-only fields)."""

    request_id: str
    token_ids: list[int]
    """The prompt's token ids: the chat template applied, special tokens added as for generation."""
    sampling_params: dict[str, Any]
    """The engine's sampling parameters for it (SamplingParams' field names, as vLLM's)."""
    model: str | None = None
    stream: bool | None = False
