"""Speculative decoding in the scheduler, without a model: what a draft adds to a step, what a
verification advances, and what never reaches the prefix cache."""

from __future__ import annotations

from engine.core.request import Request
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import ModelRunnerOutput, SampledToken, SchedulerOutput
from tests.engine.factories import make_request, make_scheduler

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}
PHRASE = [11, 12, 13, 14, 15, 16, 17, 18]


def scheduler(**config: object) -> Scheduler:
    return make_scheduler(speculative_config=NGRAM, **config)  # type: ignore[arg-type]


def verified(output: SchedulerOutput, num_accepted: int, token_id: int = 99) -> ModelRunnerOutput:
    """Every sampling request gets `token_id`; a draft has its first `num_accepted` accepted."""
    sampling = [s for s in output.scheduled if s.do_sample]
    runner = ModelRunnerOutput({s.request_id: SampledToken(token_id) for s in sampling})
    for s in output.scheduled:
        if s.draft_token_ids:
            runner.num_accepted_draft_tokens[s.request_id] = min(
                num_accepted, len(s.draft_token_ids)
            )
    return runner


def prefilled(sched: Scheduler, request: Request, first_token: int) -> None:
    """The request's prompt computed and its first token sampled (a draft proposed after)."""
    sched.add_request(request)
    while not request.output_token_ids:  # in chunks when the budget is small
        out = sched.schedule()
        sched.update(out, verified(out, 0, first_token))


def test_a_decode_with_a_draft_computes_its_token_and_the_draft_in_one_step() -> None:
    sched = scheduler()
    request = make_request(PHRASE * 2, max_tokens=20)
    prefilled(sched, request, first_token=11)  # "... 18 11": "11" occurred, followed by 12 13 14
    assert list(request.spec_token_ids) == [12, 13, 14]
    out = sched.schedule()
    [item] = out.scheduled
    assert item.new_token_ids == [11, 12, 13, 14] and item.draft_token_ids == [12, 13, 14]
    assert out.num_decode_tokens == 1  # the draft's tokens count as prefill for the step cost
    computed = request.num_computed_tokens
    [core] = sched.update(out, verified(out, num_accepted=2, token_id=77))
    assert core.new_token_ids == [12, 13, 77]
    assert request.num_computed_tokens == computed + 3  # its token and two accepted: verified
    assert request.num_tokens - request.num_computed_tokens == 1


def test_a_draft_is_cut_to_the_budget_the_context_length_and_max_tokens() -> None:
    for config, max_tokens, expected in (
        ({"max_num_batched_tokens": 3}, 20, 2),  # room for its token and two draft tokens
        ({}, 3, 1),  # two tokens left: one verified draft token and the one after it
    ):
        sched = scheduler(**config)
        request = make_request(PHRASE * 2, max_tokens=max_tokens)
        prefilled(sched, request, first_token=11)
        [item] = sched.schedule().scheduled
        assert len(item.draft_token_ids) == expected
    sched = make_scheduler(speculative_config=NGRAM, max_model_len=len(PHRASE) * 2 + 3)  # type: ignore[arg-type]
    request = make_request(PHRASE * 2, max_tokens=20)
    prefilled(sched, request, first_token=11)
    [item] = sched.schedule().scheduled
    assert len(item.draft_token_ids) == 1


def test_tokens_after_a_stop_inside_the_draft_are_dropped() -> None:
    sched = scheduler()
    request = make_request(PHRASE * 2, max_tokens=20, stop_token_ids=[13])
    prefilled(sched, request, first_token=11)
    out = sched.schedule()
    [core] = sched.update(out, verified(out, num_accepted=3))
    assert core.new_token_ids == [12, 13] and core.finish_reason == "stop"


def test_only_blocks_of_verified_tokens_are_cached() -> None:
    """With 16-token blocks, a 15-token prompt and its first token fill block 0; a draft
    reaching into block 1 and rejected leaves block 1 uncached."""
    sched = scheduler(block_size=16)
    prompt = [21, 22, 23, 24, 25] * 3
    request = make_request(prompt, max_tokens=20)
    prefilled(sched, request, first_token=21)  # draft 22 23 24 at positions 16..18
    out = sched.schedule()
    assert out.scheduled[0].draft_token_ids
    sched.update(out, verified(out, num_accepted=0))
    assert request.num_computed_tokens == 16
    assert len(sched.cached_block_hashes()) == 1


def test_a_preempted_request_loses_its_draft() -> None:
    sched = scheduler(block_size=16)
    request = make_request(PHRASE * 2, max_tokens=20)
    prefilled(sched, request, first_token=11)
    assert request.spec_token_ids
    sched._preempt(request)
    assert not request.spec_token_ids
