"""The checks a request's token ids and lengths must pass before the engine runs it (torch-free),
shared by the engine (`LLMEngine.add_core_request`) and the render endpoints, so rendering refuses
exactly what generation refuses."""

from __future__ import annotations

from engine.inputs.sampling_params import SamplingParams
from pagedock.errors import InvalidRequestError, PromptTooLongError


def check_prompt_ids(token_ids: list[int], vocab_size: int) -> None:
    if not token_ids:
        raise InvalidRequestError("the prompt is empty", "prompt")
    bad = [t for t in token_ids if not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"token ids must be integers in [0, {vocab_size}); got {bad[:5]}", "prompt"
        )


def check_stop_token_ids(params: SamplingParams, vocab_size: int) -> None:
    """Ids the sampler indexes logits with must lie in the vocabulary, which only the engine
    knows: past it, one request's ban would fail the whole step's sampling."""
    bad = [t for t in params.stop_token_ids if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"stop_token_ids must be in [0, {vocab_size}); got {bad[:5]}", "stop_token_ids"
        )


def resolve_max_tokens(num_prompt_tokens: int, params: SamplingParams, max_model_len: int) -> int:
    """The resolved max_tokens; PromptTooLongError when prompt + max_tokens can't fit."""
    if num_prompt_tokens >= max_model_len:
        raise PromptTooLongError(
            f"the prompt has {num_prompt_tokens} tokens; this model's maximum context length "
            f"is {max_model_len} tokens, leaving no room to generate",
            "prompt",
        )
    if params.max_tokens is None:
        return max_model_len - num_prompt_tokens
    if num_prompt_tokens + params.max_tokens > max_model_len:
        raise PromptTooLongError(
            f"this model's maximum context length is {max_model_len} tokens, but "
            f"{num_prompt_tokens + params.max_tokens} were requested "
            f"({num_prompt_tokens} in the prompt, {params.max_tokens} to generate)",
            "max_tokens",
        )
    return params.max_tokens
