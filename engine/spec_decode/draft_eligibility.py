"""Which requests get drafts. Verification (engine/sampling/rejection_sampler.py) is exact for
greedy rows and for random rows sampled by temperature, top-k, top-p and min-p from the engine's
own generator; a request asking for anything else decodes one token a step, as without
speculation, until that is handled exactly too."""

from __future__ import annotations

from engine.inputs.sampling_params import SamplingParams


def accepts_drafts(params: SamplingParams, num_output_tokens: int) -> bool:
    """False for what speculation does not handle exactly yet: structured outputs (the grammar
    would have to follow each draft), logprobs and prompt logprobs (per accepted token), penalties
    (their counts change within a draft), a seed of its own (its draws are tied to positions),
    EOS banned until min_tokens, and stop strings (the text is matched after the step, so tokens
    past the string would be kept)."""
    return not (
        params.structured_outputs is not None
        or params.logprobs is not None
        or params.prompt_logprobs is not None
        or params.has_penalties
        or params.seed is not None
        or num_output_tokens < params.min_tokens
        or params.stop
    )
