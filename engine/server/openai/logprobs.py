"""Log-probabilities in the two shapes OpenAI uses: chat (`content: [{token, logprob, bytes,
top_logprobs}]`) and legacy completions (parallel lists `tokens`, `token_logprobs`,
`top_logprobs`, `text_offset`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from engine.core.scheduler_output import SampledToken
from pagedock.protocol import ChatChoiceLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob

if TYPE_CHECKING:
    from pagedock.text.tokenizer import Tokenizer

# JSON has no -inf; OpenAI reports a token the model gives no chance at as -9999.
_MIN_LOGPROB = -9999.0


def token_text(tokenizer: Tokenizer | None, token_id: int) -> str:
    """A token as a client reads it: its decoded text (special tokens included); `token_id:N`
    when there is no tokenizer."""
    if tokenizer is None:
        return f"token_id:{token_id}"
    return tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(tokenizer: Tokenizer | None, sampled: list[SampledToken]) -> ChatChoiceLogprobs:
    content = []
    for token in sampled:
        text = token_text(tokenizer, token.token_id)
        top = [
            TopLogprob(token=t, logprob=lp, bytes=list(t.encode()))
            for t, lp in _top(tokenizer, token)
        ]
        content.append(
            ChatTokenLogprob(
                token=text,
                logprob=_finite(token.logprob),
                bytes=list(text.encode()),
                top_logprobs=top,
            )
        )
    return ChatChoiceLogprobs(content=content)


def completion_logprobs(
    tokenizer: Tokenizer | None, sampled: list[SampledToken], text_offset: int
) -> CompletionLogprobs:
    """`text_offset`: where in the choice's text the first of these tokens starts."""
    result = CompletionLogprobs()
    for token in sampled:
        text = token_text(tokenizer, token.token_id)
        result.tokens.append(text)
        result.token_logprobs.append(_finite(token.logprob))
        result.top_logprobs.append(dict(_top(tokenizer, token)))
        result.text_offset.append(text_offset)
        text_offset += len(text)
    return result


def _top(tokenizer: Tokenizer | None, token: SampledToken) -> list[tuple[str, float]]:
    top = token.top_logprobs or {}
    return [(token_text(tokenizer, i), _finite(lp)) for i, lp in top.items()]


def _finite(logprob: float | None) -> float:
    if logprob is None or math.isnan(logprob):
        return _MIN_LOGPROB
    return max(logprob, _MIN_LOGPROB)
