"""How many tokens a request may generate within the model's context: the one check of prompt +
max_tokens against max_model_len, with the numbers in its error (OpenAI's context_length_exceeded)."""

from __future__ import annotations

from engine.errors import PromptTooLongError
from engine.sampling_params import SamplingParams


def resolve_max_tokens(num_prompt_tokens: int, params: SamplingParams, max_model_len: int) -> int:
    """The resolved max_tokens; PromptTooLongError when prompt + max_tokens can't fit."""
    limit = max_model_len
    if num_prompt_tokens >= limit:
        raise PromptTooLongError(
            f"the prompt has {num_prompt_tokens} tokens; this model's maximum context length "
            f"is {limit} tokens, leaving no room to generate",
            "prompt",
        )
    if params.max_tokens is None:
        return limit - num_prompt_tokens
    if num_prompt_tokens + params.max_tokens > limit:
        raise PromptTooLongError(
            f"this model's maximum context length is {limit} tokens, but "
            f"{num_prompt_tokens + params.max_tokens} were requested "
            f"({num_prompt_tokens} in the prompt, {params.max_tokens} to generate)",
            "max_tokens",
        )
    return params.max_tokens
