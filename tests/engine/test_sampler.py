"""The sampler against direct computations on the logits."""

from __future__ import annotations

import torch

from engine.core.scheduler_output import ScheduledRequest
from engine.inputs.sampling_params import SamplingParams
from engine.sampling.sampler import Sampler, apply_top_k_top_p
from engine.sampling.sampling_batch import build_sampling_tensors

VOCAB = 50


def scheduled(
    params: SamplingParams, prompt: list[int] = (), output: list[int] = (), banned: list[int] = ()
) -> ScheduledRequest:  # type: ignore[assignment]
    return ScheduledRequest(
        "r", [1], 0, [0], True, params, list(prompt), list(output), list(banned)
    )


def sample(logits: torch.Tensor, items: list[ScheduledRequest], seed: int = 0) -> list:
    sampler = Sampler(torch.Generator().manual_seed(seed))
    return sampler(logits, build_sampling_tensors(items, lambda s: None))


def test_greedy_takes_the_argmax() -> None:
    logits = torch.randn(3, VOCAB)
    out = sample(logits, [scheduled(SamplingParams(temperature=0))] * 3)
    assert [o.token_id for o in out] == logits.argmax(-1).tolist()


def test_banned_tokens_are_never_sampled() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, 5] = 100.0
    out = sample(logits, [scheduled(SamplingParams(temperature=0), banned=[5])])
    assert out[0].token_id != 5


def test_logprobs_are_the_log_softmax_of_the_raw_logits() -> None:
    logits = torch.randn(1, VOCAB)
    out = sample(logits, [scheduled(SamplingParams(temperature=0, logprobs=3))])[0]
    expected = torch.log_softmax(logits[0], -1)
    assert abs(out.logprob - float(expected[out.token_id])) < 1e-6
    top = expected.topk(3)
    assert out.top_logprobs == dict(zip(top.indices.tolist(), top.values.tolist(), strict=True))


def test_presence_and_frequency_penalties_subtract_from_output_tokens() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, 7] = 1.0
    logits[0, 8] = 0.9
    params = SamplingParams(temperature=0, presence_penalty=0.05, frequency_penalty=0.05)
    # 7 appeared twice: 1.0 - 0.05 - 2 * 0.05 = 0.85 < 0.9.
    out = sample(logits, [scheduled(params, output=[7, 7])])
    assert out[0].token_id == 8


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    from engine.sampling.sampler import apply_penalties

    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    params = SamplingParams(repetition_penalty=2.0)
    t = build_sampling_tensors([scheduled(params, prompt=[0], output=[1])], lambda s: None)
    assert apply_penalties(logits, t).tolist() == [[1.0, -4.0, 2.0, -2.0]]


def test_top_k_keeps_the_k_largest() -> None:
    logits = torch.arange(10.0).unsqueeze(0)
    masked = apply_top_k_top_p(logits, torch.tensor([3]), torch.tensor([1.0]))
    assert torch.isfinite(masked[0]).nonzero().flatten().tolist() == [7, 8, 9]


def test_top_p_keeps_the_smallest_nucleus_reaching_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    masked = apply_top_k_top_p(probs.log(), torch.tensor([0]), torch.tensor([0.8]))
    assert torch.isfinite(masked[0]).tolist() == [True, True, False, False]


def test_sampling_follows_the_distribution() -> None:
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log().expand(4000, 3).clone()
    items = [scheduled(SamplingParams(temperature=1.0))] * 4000
    counts = torch.bincount(torch.tensor([o.token_id for o in sample(logits, items)]), minlength=3)
    assert torch.allclose(counts / 4000, probs, atol=0.03)


def test_a_seeded_request_samples_the_same_whatever_shares_its_batch() -> None:
    def draw(batch_size: int) -> int:
        logits = torch.zeros(batch_size, VOCAB)
        seeded = scheduled(SamplingParams(temperature=1.0, seed=3))
        others = [scheduled(SamplingParams(temperature=1.0))] * (batch_size - 1)
        gens = [torch.Generator().manual_seed(3)] + [None] * (batch_size - 1)
        tensors = build_sampling_tensors([seeded, *others], lambda s: None)
        tensors.generators = gens
        return Sampler(torch.Generator().manual_seed(batch_size))(logits, tensors)[0].token_id

    assert draw(1) == draw(5) == draw(9)
