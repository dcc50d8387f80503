"""Log-probabilities as the engine hands them back, in vLLM's shapes: a `Logprob` per token, and
a request's prompt logprobs as one entry per prompt token: None for the first (nothing before it
predicts it), then {token id: Logprob} holding that prompt token first and the top alternatives
at its position after it (as many as `SamplingParams.prompt_logprobs` asks; the prompt token may
be one of them, and is then listed once)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.scheduler_output import LogprobsLists
from pagedock.text.detokenizer import SupportsDecode


@dataclass
class Logprob:
    """One token's log-probability at one position (vLLM's)."""

    logprob: float
    rank: int | None = None
    """Its rank in the vocabulary at that position: 1 = the most likely."""
    decoded_token: str | None = None
    """Its text alone (special tokens included); None without a tokenizer."""


PromptLogprobs = list[dict[int, Logprob] | None]


def prompt_logprobs_of(rows: LogprobsLists, tokenizer: SupportsDecode | None) -> PromptLogprobs:
    """A request's prompt logprobs from the rows the engine computed for prompt tokens 1 on."""
    assert rows.first_token_index == 1, "prompt logprobs start at the second prompt token"
    texts: dict[int, str | None] = {}

    def text(token_id: int) -> str | None:
        if tokenizer is None:
            return None
        if token_id not in texts:
            texts[token_id] = tokenizer.decode([token_id], skip_special_tokens=False)
        return texts[token_id]

    out: PromptLogprobs = [None]
    for ids, values, rank in zip(
        rows.logprob_token_ids, rows.logprobs, rows.selected_token_ranks, strict=True
    ):
        entry = {ids[0]: Logprob(values[0], rank, text(ids[0]))}
        for top_rank, (token_id, value) in enumerate(zip(ids[1:], values[1:], strict=True), 1):
            if token_id not in entry:
                entry[token_id] = Logprob(value, top_rank, text(token_id))
        out.append(entry)
    return out
