"""Log-probabilities in the two shapes OpenAI uses: chat (`content: [{token, logprob, bytes,
top_logprobs}]`) and legacy completions (parallel lists `tokens`, `token_logprobs`,
`top_logprobs`, `text_offset`), the latter also for an echoed prompt's tokens (built as vLLM
builds them: the first prompt token's logprob and top entries null, each later position's top
entries the prompt token, then the top alternatives), and vLLM's `prompt_logprobs` field; and
where a non-streamed answer carrying many of them is built.

They dominate a large answer: every sampled token brings its top alternatives, each decoded to
text, and n = 128 x top 20 x 256 tokens is 11 MB of JSON and over a second of CPU. Built on the
event loop, that second stalls /health and every other stream. So such an answer is built in a
thread (`answer_body`), and serialised a choice at a time (`answer_json`), never in one call that
holds the GIL for the whole 11 MB (~0.1 s): the loop gets the GIL back between choices.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from engine.core.scheduler_output import SampledToken
from engine.runtime.logprobs import Logprob, PromptLogprobs
from engine.server.openai.generation import ChoiceState
from pagedock.protocol import (
    ChatChoiceLogprobs,
    ChatCompletionResponse,
    ChatTokenLogprob,
    CompletionLogprobs,
    CompletionResponse,
    TopLogprob,
)
from pagedock.protocol.openai import PromptLogprob, PromptLogprobsField

if TYPE_CHECKING:
    from pagedock.text.tokenizer import Tokenizer

# JSON has no -inf; OpenAI reports a token the model gives no chance at as -9999.
_MIN_LOGPROB = -9999.0

OFF_LOOP_MIN_LOGPROB_ENTRIES = 4096
"""Log-probability entries (sampled tokens x (1 + alternatives)) from which an answer is built in
a thread: ~4,096 entries take ~10 ms to build, the most the loop should wait on one answer."""

# What an empty choice list serialises as: the one place the choices are spliced in. The key
# cannot occur earlier unescaped (the fields before it are an id, numbers and escaped strings).
_NO_CHOICES = '"choices":[]'


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


def echo_logprobs(
    tokenizer: Tokenizer | None,
    prompt_token_ids: list[int],
    prompt_logprobs: PromptLogprobs,
    num_top: int,
) -> CompletionLogprobs:
    """The prompt tokens' entries, text offsets counted from 0 over their texts; `num_top`:
    alternatives per position beside the prompt token (the request's `logprobs`)."""
    result = CompletionLogprobs()
    text_offset = 0
    for token_id, entry in zip(prompt_token_ids, prompt_logprobs, strict=True):
        text = (
            token_text(tokenizer, token_id)
            if entry is None
            else _text(tokenizer, token_id, entry[token_id])
        )
        result.tokens.append(text)
        result.text_offset.append(text_offset)
        text_offset += len(text)
        if entry is None:
            result.token_logprobs.append(None)
            result.top_logprobs.append(None)
            continue
        result.token_logprobs.append(_finite(entry[token_id].logprob))
        top = islice(entry.items(), num_top + 1)
        result.top_logprobs.append({_text(tokenizer, i, lp): _finite(lp.logprob) for i, lp in top})
    return result


def joined(first: CompletionLogprobs, then: CompletionLogprobs) -> CompletionLogprobs:
    """`first`'s entries followed by `then`'s (the echoed prompt's, then the generated ones)."""
    return CompletionLogprobs(
        tokens=first.tokens + then.tokens,
        token_logprobs=first.token_logprobs + then.token_logprobs,
        top_logprobs=first.top_logprobs + then.top_logprobs,
        text_offset=first.text_offset + then.text_offset,
    )


def prompt_logprobs_field(prompt_logprobs: PromptLogprobs, num_top: int) -> PromptLogprobsField:
    """vLLM's `prompt_logprobs`: each position's prompt token and `num_top` alternatives."""
    return [
        None
        if entry is None
        else {
            token_id: PromptLogprob(
                logprob=_finite(lp.logprob), rank=lp.rank, decoded_token=lp.decoded_token
            )
            for token_id, lp in islice(entry.items(), num_top + 1)
        }
        for entry in prompt_logprobs
    ]


def num_prompt_entries(prompt_logprobs: PromptLogprobs | None, num_top: int | None) -> int:
    """Entries one copy of a prompt's logprobs adds to an answer (0 when none is sent)."""
    if prompt_logprobs is None or num_top is None:
        return 0
    return len(prompt_logprobs) * (2 + num_top)


def _text(tokenizer: Tokenizer | None, token_id: int, logprob: Logprob) -> str:
    if logprob.decoded_token is not None:
        return logprob.decoded_token
    return token_text(tokenizer, token_id)


def _top(tokenizer: Tokenizer | None, token: SampledToken) -> list[tuple[str, float]]:
    top = token.top_logprobs or {}
    return [(token_text(tokenizer, i), _finite(lp)) for i, lp in top.items()]


def _finite(logprob: float | None) -> float:
    if logprob is None or math.isnan(logprob):
        return _MIN_LOGPROB
    return max(logprob, _MIN_LOGPROB)


def num_logprob_entries(choices: Sequence[ChoiceState], num_top: int | None) -> int:
    """Entries an answer reports: each choice's tokens with `num_top` alternatives each (None:
    no log-probabilities asked for)."""
    if num_top is None:
        return 0
    return sum(len(c.logprobs) for c in choices) * (1 + num_top)


async def answer_body(num_entries: int, build: Callable[[], bytes]) -> bytes:
    """build(), in a thread when the answer has at least OFF_LOOP_MIN_LOGPROB_ENTRIES entries.
    `build` reads only finished state (a collected generation), so any thread may run it."""
    if num_entries < OFF_LOOP_MIN_LOGPROB_ENTRIES:
        return build()
    return await asyncio.to_thread(build)


def answer_json(
    response: CompletionResponse | ChatCompletionResponse, exclude: dict[str, Any] | None
) -> bytes:
    """response.model_dump_json(exclude=exclude), encoded, serialised one choice at a time.
    `exclude` is response_exclusions()'s: a choice's own exclusions are under choices.__all__."""
    exclude = exclude or {}
    envelope = response.model_copy(update={"choices": []}).model_dump_json(exclude=exclude)
    choice_exclude = exclude.get("choices", {}).get("__all__")
    choices = ",".join(c.model_dump_json(exclude=choice_exclude) for c in response.choices)
    return envelope.replace(_NO_CHOICES, f'"choices":[{choices}]', 1).encode()
