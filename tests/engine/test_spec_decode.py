"""Speculative decoding on the tiny model: greedy outputs are token for token those of decoding
without it, with n-gram drafts and with drafts that are partly right (an oracle that knows the
reference output and spoils some of its tokens), through prefix caching, chunked prefill, a batch
of requests and preemption."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.inputs.sampling_params import SamplingParams
from engine.runtime.llm import LLM
from engine.spec_decode.spec_decoding_stats import SpecDecodingStats
from tests.tiny_model import TINY_VOCAB

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1}
K = 4


def make_llm(model_dir: Path, speculative: dict | None = None, **config: Any) -> LLM:
    config.setdefault("num_kv_blocks", 128)
    config.setdefault("max_model_len", 512)
    return LLM(str(model_dir), block_size=16, speculative_config=speculative, **config)


def greedy(max_tokens: int = 40, **params: Any) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **params)


def generate(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def spec_stats(llm: LLM) -> SpecDecodingStats:
    stats = llm.stats().spec_decoding_stats
    assert stats is not None
    return stats


def repeating_prompts(count: int, seed: int = 0) -> list[list[int]]:
    """Prompts that repeat a random phrase, so their n-grams recur."""
    rng = random.Random(seed)
    phrases = [
        [rng.randrange(3, TINY_VOCAB) for _ in range(rng.randint(5, 12))] for _ in range(count)
    ]
    return [phrase * 4 for phrase in phrases]


class OracleProposer:
    """Drafts from the reference output of each prompt (spec off), every third one spoiled at
    one position: drafts accepted whole, in part, and not at all."""

    def __init__(self, references: dict[tuple[int, ...], list[int]]) -> None:
        self.references = references
        self.num_calls = 0

    def propose(self, token_ids: Sequence[int], max_num_tokens: int | None = None) -> list[int]:
        for prompt, reference in self.references.items():
            if tuple(token_ids[: len(prompt)]) == prompt:
                output = list(token_ids[len(prompt) :])
                assert output == reference[: len(output)], "the output left the reference"
                draft = reference[len(output) : len(output) + min(K, max_num_tokens or K)]
                self.num_calls += 1
                if draft and self.num_calls % 3 == 0:
                    spoilt = self.num_calls % len(draft)
                    draft[spoilt] = (draft[spoilt] + 1) % TINY_VOCAB
                return draft
        return []


def with_oracle(llm: LLM, prompts: list[list[int]], references: list[list[int]]) -> LLM:
    speculation = llm.engine.scheduler.speculation
    assert speculation is not None
    oracle = OracleProposer({tuple(p): r for p, r in zip(prompts, references, strict=True)})
    speculation.proposer = oracle  # type: ignore[assignment]
    return llm


def test_ngram_drafts_leave_greedy_outputs_unchanged(tiny_model_dir: Path) -> None:
    prompts = repeating_prompts(4)
    reference = generate(make_llm(tiny_model_dir), prompts, greedy())
    llm = make_llm(tiny_model_dir, NGRAM)
    assert generate(llm, prompts, greedy()) == reference
    stats = spec_stats(llm)
    assert stats.num_drafts > 0 and stats.num_draft_tokens >= stats.num_drafts


def test_partly_accepted_drafts_leave_greedy_outputs_unchanged(tiny_model_dir: Path) -> None:
    prompts = repeating_prompts(5, seed=1)
    params = greedy(max_tokens=37)  # not a multiple of a draft's tokens
    reference = generate(make_llm(tiny_model_dir), prompts, params)
    llm = with_oracle(make_llm(tiny_model_dir, NGRAM), prompts, reference)
    assert generate(llm, prompts, params) == reference
    stats = spec_stats(llm)
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    assert stats.num_accepted_tokens_per_pos[K - 1] > 0  # some drafts accepted whole
    assert sum(stats.num_accepted_tokens_per_pos) == stats.num_accepted_tokens


def test_a_stop_token_inside_a_draft_drops_what_follows(tiny_model_dir: Path) -> None:
    prompts = repeating_prompts(1, seed=2)
    [unstopped] = generate(make_llm(tiny_model_dir), prompts, greedy())
    params = greedy(stop_token_ids=[unstopped[13]])
    [reference] = generate(make_llm(tiny_model_dir), prompts, params)
    assert len(reference) <= 14
    llm = with_oracle(make_llm(tiny_model_dir, NGRAM), prompts, [unstopped])
    assert generate(llm, prompts, params) == [reference]


def test_blocks_computed_with_drafts_serve_later_prefix_hits(tiny_model_dir: Path) -> None:
    """Only verified tokens' blocks are cached: a later prompt that reuses the generated text's
    blocks continues as it does on an engine that never speculated."""
    prompts = repeating_prompts(2, seed=3)
    plain = make_llm(tiny_model_dir)
    reference = generate(plain, prompts, greedy(max_tokens=60))
    llm = with_oracle(make_llm(tiny_model_dir, NGRAM), prompts, reference)
    assert generate(llm, prompts, greedy(max_tokens=60)) == reference
    followups = [p + r[:50] for p, r in zip(prompts, reference, strict=True)]
    with_oracle(llm, [], [])  # no drafts: the follow-ups decode as on the plain engine
    hits_before = llm.stats().prefix_cache_hits
    assert generate(llm, followups, greedy(20)) == generate(plain, followups, greedy(20))
    assert llm.stats().prefix_cache_hits - hits_before >= 2 * 48  # into the generated tokens


def test_drafts_beside_a_chunked_long_prompt(tiny_model_dir: Path) -> None:
    rng = random.Random(4)
    prompts = [*repeating_prompts(2, seed=4), [rng.randrange(3, TINY_VOCAB) for _ in range(300)]]
    reference = generate(make_llm(tiny_model_dir), prompts, greedy())
    llm = make_llm(tiny_model_dir, NGRAM, max_num_batched_tokens=32)
    with_oracle(llm, prompts, reference)
    assert generate(llm, prompts, greedy()) == reference
    assert spec_stats(llm).num_accepted_tokens > 0


def test_preemption_drops_drafts_and_outputs_stay_the_same(tiny_model_dir: Path) -> None:
    prompts = repeating_prompts(4, seed=5)
    reference = generate(make_llm(tiny_model_dir), prompts, greedy(max_tokens=60))
    llm = with_oracle(
        make_llm(tiny_model_dir, NGRAM, num_kv_blocks=14, max_model_len=200), prompts, reference
    )
    assert generate(llm, prompts, greedy(max_tokens=60)) == reference
    assert llm.stats().num_preemptions > 0
    assert spec_stats(llm).num_accepted_tokens > 0


@pytest.mark.parametrize(
    "params",
    [
        greedy(logprobs=1),
        greedy(seed=1),
        greedy(repetition_penalty=1.2),
        greedy(stop=["x"]),
        greedy(min_tokens=40),
    ],
    ids=["logprobs", "seed", "penalty", "stop-string", "min-tokens"],
)
def test_requests_speculation_does_not_handle_yet_get_no_drafts(
    tiny_model_dir: Path, params: SamplingParams
) -> None:
    prompts = repeating_prompts(2, seed=6)
    llm = make_llm(tiny_model_dir, NGRAM)
    reference = generate(make_llm(tiny_model_dir), prompts, params)
    with_oracle(llm, prompts, reference)
    assert generate(llm, prompts, params) == reference
    assert spec_stats(llm).num_drafts == 0


def test_random_sampling_with_drafts_generates_every_token(tiny_model_dir: Path) -> None:
    prompts = repeating_prompts(3, seed=7)
    llm = make_llm(tiny_model_dir, NGRAM)
    params = SamplingParams(max_tokens=50, temperature=0.8, top_p=0.9, ignore_eos=True)
    outputs = generate(llm, prompts, params)
    assert [len(o) for o in outputs] == [50] * 3
    assert spec_stats(llm).num_drafts > 0


def test_with_speculation_off_there_are_no_spec_stats(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir)
    generate(llm, repeating_prompts(1), greedy(5))
    assert llm.stats().spec_decoding_stats is None
    assert llm.engine.scheduler.speculation is None


def test_a_request_whose_drafts_are_rejected_gets_few_of_them(tiny_model_dir: Path) -> None:
    """Random text: n-grams of one token recur, but the model does not follow them; after a few
    rejected drafts the request decodes without, but for one probe after each pause (16, 32, 64
    output tokens: engine/spec_decode/draft_acceptance.py)."""
    rng = random.Random(8)
    prompt = [rng.randrange(3, TINY_VOCAB) for _ in range(60)]
    llm = make_llm(tiny_model_dir, NGRAM)
    [output] = generate(llm, [prompt], greedy(max_tokens=150))
    assert len(output) == 150
    stats = spec_stats(llm)
    assert 4 <= stats.num_drafts <= 12  # MIN_DRAFTS, the probes, a few more if accepted
    assert stats.num_accepted_tokens <= stats.num_draft_tokens // 4
