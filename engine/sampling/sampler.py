"""Turns a step's logits into tokens, vectorised over the batch.

Per-row parameters arrive as tensors (`SamplingTensors`); every transformation is one batched op
over [num_rows, vocab]. The only per-request Python work is drawing noise for requests that carry
their own seed, so their tokens do not depend on what else shares the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.core.scheduler_output import SampledToken
from engine.structured_outputs.structured_output_manager import apply_grammar_bitmask


@dataclass
class SamplingTensors:
    temperature: torch.Tensor  # [N] float; 0 = greedy
    top_k: torch.Tensor  # [N] long; 0 = off
    top_p: torch.Tensor  # [N] float; 1 = off
    min_p: torch.Tensor  # [N] float; 0 = off
    presence_penalty: torch.Tensor  # [N] float
    frequency_penalty: torch.Tensor  # [N] float
    repetition_penalty: torch.Tensor  # [N] float
    # Token ids per row (padded with -1): output tokens, and prompt + output tokens.
    output_tokens: torch.Tensor | None
    seen_tokens: torch.Tensor | None
    banned: list[list[int]]
    generators: list[torch.Generator | None]
    num_logprobs: list[int | None]
    all_greedy: bool
    needs_top_k_top_p: bool
    needs_min_p: bool
    needs_penalties: bool
    # Structured outputs: the packed token bitmask ([N, ceil(vocab / 32)] int32) of the step and
    # the rows it constrains (engine/structured_outputs); None when no row is guided.
    grammar_bitmask: torch.Tensor | None = None
    grammar_rows: list[int] = field(default_factory=list)


class Sampler:
    def __init__(self, generator: torch.Generator) -> None:
        # Noise for rows without a seed of their own.
        self.generator = generator

    def __call__(self, logits: torch.Tensor, t: SamplingTensors) -> list[SampledToken]:
        raw_logits = logits
        logits = self._apply_bans(logits, t.banned)
        if t.grammar_bitmask is not None:
            logits = self._apply_grammar(raw_logits, logits, t.grammar_bitmask, t.grammar_rows)
        if t.needs_penalties:
            logits = apply_penalties(logits, t)
        token_ids = logits.argmax(dim=-1) if t.all_greedy else self._sample(logits, t)
        return self._to_outputs(raw_logits, token_ids, t.num_logprobs)

    def _apply_bans(self, logits: torch.Tensor, banned: list[list[int]]) -> torch.Tensor:
        rows = [(i, tok) for i, ids in enumerate(banned) for tok in ids]
        if not rows:
            return logits
        logits = logits.clone()
        index = torch.tensor(rows, dtype=torch.long)
        logits[index[:, 0], index[:, 1]] = float("-inf")
        return logits

    def _apply_grammar(
        self, raw_logits: torch.Tensor, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]
    ) -> torch.Tensor:
        """Mask what each guided row's grammar disallows. A row the bans (min_tokens' ban on
        end-of-sequence) and the grammar together leave with nothing gets the grammar's mask
        alone: the grammar is the contract, min_tokens yields to it."""
        masked = apply_grammar_bitmask(logits, bitmask, rows)
        index = torch.tensor(rows, dtype=torch.long)
        dead = index[torch.isneginf(masked[index]).all(dim=-1)]
        if len(dead) > 0 and raw_logits is not logits:
            only_grammar = apply_grammar_bitmask(raw_logits, bitmask, dead.tolist())
            masked[dead] = only_grammar[dead]
        return masked

    def _sample(self, logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
        greedy_ids = logits.argmax(dim=-1)
        is_greedy = t.temperature == 0
        temperature = torch.where(is_greedy, torch.ones_like(t.temperature), t.temperature)
        logits = logits / temperature.unsqueeze(1)
        if t.needs_top_k_top_p:
            logits = apply_top_k_top_p(logits, t.top_k, t.top_p)
        probs = logits.softmax(dim=-1)
        if t.needs_min_p:
            top = probs.max(dim=-1, keepdim=True).values
            probs = probs.masked_fill(probs < t.min_p.unsqueeze(1) * top, 0.0)
        sampled = (probs / self._exponential_noise(probs, t.generators)).argmax(dim=-1)
        return torch.where(is_greedy, greedy_ids, sampled)

    def _exponential_noise(
        self, probs: torch.Tensor, generators: list[torch.Generator | None]
    ) -> torch.Tensor:
        """argmax(p / E) with E ~ Exp(1) draws from p: one batched draw, then seeded rows redrawn
        from their own generators."""
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for row, gen in enumerate(generators):
            if gen is not None:
                noise[row].exponential_(generator=gen)
        return noise

    def _to_outputs(
        self, raw_logits: torch.Tensor, token_ids: torch.Tensor, num_logprobs: list[int | None]
    ) -> list[SampledToken]:
        ids = token_ids.tolist()
        if all(n is None for n in num_logprobs):
            return [SampledToken(i) for i in ids]
        logprobs = raw_logits.log_softmax(dim=-1)
        outputs = []
        for row, (token_id, k) in enumerate(zip(ids, num_logprobs, strict=True)):
            if k is None:
                outputs.append(SampledToken(token_id))
                continue
            top: dict[int, float] = {}
            if k > 0:
                values, indices = logprobs[row].topk(k)
                top = dict(zip(indices.tolist(), values.tolist(), strict=True))
            outputs.append(SampledToken(token_id, float(logprobs[row, token_id]), top))
        return outputs


def apply_penalties(logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
    """OpenAI's presence/frequency penalties on output tokens, and the multiplicative repetition
    penalty (CTRL; as HF and vLLM apply it) on every token seen in prompt or output."""
    num_rows, vocab = logits.shape
    logits = logits.clone()
    if t.output_tokens is not None:
        counts = _token_counts(t.output_tokens, num_rows, vocab)
        logits -= t.frequency_penalty.unsqueeze(1) * counts
        logits -= t.presence_penalty.unsqueeze(1) * (counts > 0).float()
    if t.seen_tokens is not None:
        seen = _token_counts(t.seen_tokens, num_rows, vocab) > 0
        penalty = t.repetition_penalty.unsqueeze(1).expand_as(logits)
        scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
        logits = torch.where(seen, scaled, logits)
    return logits


def _token_counts(tokens: torch.Tensor, num_rows: int, vocab: int) -> torch.Tensor:
    """[num_rows, vocab] occurrence counts of padded (-1) token id rows."""
    counts = torch.zeros(num_rows, vocab + 1, dtype=torch.float32)
    index = torch.where(tokens < 0, vocab, tokens)
    counts.scatter_add_(1, index, torch.ones_like(index, dtype=torch.float32))
    return counts[:, :vocab]


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Mask everything outside each row's top-k and top-p nucleus with -inf (one sort per step)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).clamp(max=vocab)
    ranks = torch.arange(vocab).unsqueeze(0)
    sorted_logits = sorted_logits.masked_fill(ranks >= k.unsqueeze(1), float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    # Keep a token when the mass strictly before it is below top_p (the first is always kept).
    mass_before = probs.cumsum(dim=-1) - probs
    sorted_logits = sorted_logits.masked_fill(mass_before >= top_p.unsqueeze(1), float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)
