import pytest

from engine.core.request import Request, RequestStatus
from engine.core.scheduler import Scheduler
from engine.core.scheduler_stats import scheduler_stats
from engine.core.step_time import MIN_PREFILL_CHUNK
from tests.engine.factories import (
    EOS,
    fake_runner_output,
    make_request,
    make_scheduler,
    run_to_completion,
)


def test_decodes_and_prefill_chunks_share_one_step() -> None:
    sched = make_scheduler(max_num_batched_tokens=32)
    first = make_request(10)
    sched.add_request(first)
    out = sched.schedule()
    sched.update(out, fake_runner_output(out))
    sched.add_request(make_request(100))
    out = sched.schedule()
    assert [s.num_new_tokens for s in out.scheduled] == [1, 31]
    assert out.num_scheduled_tokens == 32


def test_a_long_prompt_is_prefilled_in_chunks_and_samples_only_at_its_end() -> None:
    sched = make_scheduler(max_num_batched_tokens=16)
    sched.add_request(make_request(40, max_tokens=1))
    chunks = []
    for _ in range(3):
        out = sched.schedule()
        chunks.append((out.scheduled[0].num_new_tokens, out.scheduled[0].do_sample))
        sched.update(out, fake_runner_output(out))
    assert chunks == [(16, False), (16, False), (8, True)]
    assert not sched.has_unfinished_requests()


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room() -> None:
    sched = make_scheduler(max_num_batched_tokens=64, enable_chunked_prefill=False)
    sched.add_request(make_request(40))
    sched.add_request(make_request(40))
    out = sched.schedule()
    assert [s.num_new_tokens for s in out.scheduled] == [40]


def test_max_num_seqs_caps_the_running_set() -> None:
    sched = make_scheduler(max_num_seqs=2)
    for _ in range(3):
        sched.add_request(make_request(4))
    out = sched.schedule()
    assert len(out.scheduled) == 2
    assert len(sched.waiting) == 1


def test_when_blocks_run_out_the_newest_running_request_is_preempted() -> None:
    sched = make_scheduler(num_blocks=4, block_size=16, max_model_len=64)
    old, new = make_request(30, max_tokens=20), make_request(30, max_tokens=20)
    sched.add_request(old)
    sched.add_request(new)
    preempted: list[str] = []
    while sched.has_unfinished_requests():
        out = sched.schedule()
        preempted += out.preempted_req_ids
        sched.update(out, fake_runner_output(out))
    assert preempted and set(preempted) == {new.request_id}
    assert old.status == new.status == RequestStatus.FINISHED_LENGTH
    assert old.num_output_tokens == new.num_output_tokens == 20
    assert scheduler_stats(sched).num_free_kv_blocks == 4


def test_priority_policy_preempts_the_least_important_request() -> None:
    sched = make_scheduler(num_blocks=4, max_model_len=64, scheduling_policy="priority")
    urgent = make_request(30, max_tokens=20, priority=0, arrival_time=2.0)
    lazy = make_request(30, max_tokens=20, priority=5, arrival_time=1.0)
    sched.add_request(lazy)
    sched.add_request(urgent)
    preempted: list[str] = []
    while sched.has_unfinished_requests():
        out = sched.schedule()
        preempted += out.preempted_req_ids
        sched.update(out, fake_runner_output(out))
    assert set(preempted) == {lazy.request_id}


def test_eos_stops_a_request_unless_ignored_or_before_min_tokens() -> None:
    sched = make_scheduler()
    plain, ignoring, patient = (
        make_request(4),
        make_request(4, ignore_eos=True),
        make_request(4, min_tokens=3),
    )
    for r in (plain, ignoring, patient):
        sched.add_request(r)
    for _ in range(4):
        out = sched.schedule()
        if out.is_empty:
            break
        sched.update(out, fake_runner_output(out, token_id=EOS))
    assert plain.num_output_tokens == 1 and plain.status == RequestStatus.FINISHED_STOPPED
    assert patient.num_output_tokens == 3
    assert ignoring.num_output_tokens == 4


def test_eos_is_banned_from_sampling_until_min_tokens() -> None:
    sched = make_scheduler()
    sched.add_request(make_request(4, min_tokens=2, stop_token_ids=[9]))
    out = sched.schedule()
    assert out.scheduled[0].banned_token_ids == [EOS, 9]


def test_stop_token_ids_stop_with_the_token_as_stop_reason() -> None:
    sched = make_scheduler()
    r = make_request(4, stop_token_ids=[7])
    sched.add_request(r)
    run_to_completion(sched)
    assert r.status == RequestStatus.FINISHED_STOPPED and r.stop_reason == 7


def test_an_aborted_request_returns_its_blocks_even_mid_prefill() -> None:
    sched = make_scheduler(max_num_batched_tokens=16)
    r = make_request(100)
    sched.add_request(r)
    sched.schedule()
    sched.finish_request(r.request_id, RequestStatus.FINISHED_ABORTED)
    assert scheduler_stats(sched).num_free_kv_blocks == 64
    assert r.request_id in sched.schedule().finished_req_ids


def test_a_request_sharing_a_cached_3_block_prefix_computes_only_the_rest() -> None:
    sched = make_scheduler(block_size=16)
    prefix = list(range(100, 148))  # 3 full blocks
    first = make_request([*prefix, 1, 2, 3], max_tokens=2)
    sched.add_request(first)
    run_to_completion(sched)
    second = make_request([*prefix, 4, 5, 6, 7, 8], max_tokens=2)
    sched.add_request(second)
    out = sched.schedule()
    assert out.scheduled[0].num_computed_tokens == 48
    assert out.scheduled[0].num_new_tokens == 5
    assert second.num_cached_tokens == 48


def test_a_full_prefix_hit_still_recomputes_the_last_token() -> None:
    sched = make_scheduler(block_size=16)
    prompt = list(range(100, 132))  # exactly 2 blocks
    sched.add_request(make_request(prompt, max_tokens=1))
    run_to_completion(sched)
    sched.add_request(make_request(prompt, max_tokens=1))
    out = sched.schedule()
    # The last block is recomputed whole: a cached block is never written into.
    assert (out.scheduled[0].num_computed_tokens, out.scheduled[0].num_new_tokens) == (16, 16)


def test_decodes_go_before_a_long_prefill_that_would_use_the_whole_budget() -> None:
    sched = make_scheduler(max_num_batched_tokens=40, scheduling_policy="priority")
    decoding = make_request(4, max_tokens=20, priority=1)
    sched.add_request(decoding)
    step(sched)
    sched.add_request(make_request(200, priority=0))  # more important, so first in running
    step(sched)
    out = sched.schedule()
    first = out.scheduled[0]
    assert (first.request_id, first.num_new_tokens) == (decoding.request_id, 1)
    assert out.num_scheduled_tokens == 40


def test_a_wave_of_prompts_is_prefilled_shortest_first() -> None:
    sched = make_scheduler(max_num_batched_tokens=64)
    long, short, middle = (
        make_request(n, arrival_time=100.0 + i / 1000) for i, n in enumerate((100, 10, 30))
    )
    for request in (long, short, middle):
        sched.add_request(request)
    out = sched.schedule()
    assert [(s.request_id, s.num_new_tokens) for s in out.scheduled] == [
        (short.request_id, 10),
        (middle.request_id, 30),
        (long.request_id, 24),
    ]


def test_a_later_wave_never_passes_an_earlier_one() -> None:
    sched = make_scheduler(max_num_batched_tokens=64)
    early, late = make_request(100, arrival_time=100.0), make_request(10, arrival_time=101.0)
    sched.add_request(early)
    sched.add_request(late)
    assert [s.request_id for s in sched.schedule().scheduled] == [early.request_id]


def test_a_step_target_cuts_prefill_beside_decodes_to_what_the_step_cost_allows() -> None:
    sched = make_scheduler(
        num_blocks=128, max_model_len=1024, max_num_batched_tokens=2048, max_step_ms=100
    )
    decoding = make_request(4, max_tokens=50)
    sched.add_request(decoding)
    step(sched)
    # Measured: decodes alone 20 ms, 0.25 ms per prefill token -> 320 tokens fit beside them.
    sched.step_time.observe(num_decode_tokens=1, num_prefill_tokens=0, seconds=0.020)
    sched.step_time.observe(num_decode_tokens=0, num_prefill_tokens=400, seconds=0.100)
    sched.add_request(make_request(600))
    out = sched.schedule()
    assert [s.num_new_tokens for s in out.scheduled] == [1, 320]


def test_prompts_outnumbering_the_decodes_stretch_the_step_target_by_their_ratio() -> None:
    sched = make_scheduler(
        num_blocks=256, max_model_len=1024, max_num_batched_tokens=2048, max_step_ms=100
    )
    sched.add_request(make_request(4, max_tokens=50))
    step(sched)
    sched.step_time.observe(num_decode_tokens=1, num_prefill_tokens=0, seconds=0.020)
    sched.step_time.observe(num_decode_tokens=0, num_prefill_tokens=400, seconds=0.100)
    for _ in range(3):
        sched.add_request(make_request(600))
    # 3 prompts beside 1 decode: a 300 ms step, (300 - 20) / 0.25 = 1,120 prefill tokens.
    assert [s.num_new_tokens for s in sched.schedule().scheduled] == [1, 600, 520]


def decoding_scheduler(num_decodes: int) -> Scheduler:
    """Default settings (no step target), 2,048 tokens a step, `num_decodes` requests decoding."""
    sched = make_scheduler(num_blocks=256, max_model_len=1024, max_num_batched_tokens=2048)
    assert sched.config.max_step_ms is None
    for _ in range(num_decodes):
        sched.add_request(make_request(4, max_tokens=50))
    step(sched)
    return sched


def test_by_default_a_step_beside_decodes_prefills_a_fifth_of_the_budget() -> None:
    sched = decoding_scheduler(3)
    sched.add_request(make_request(900))
    # Whatever the machine's speed: nothing measured, the same share.
    assert [s.num_new_tokens for s in sched.schedule().scheduled] == [1, 1, 1, 409]


def test_by_default_a_burst_of_prompts_takes_the_whole_budget() -> None:
    sched = decoding_scheduler(4)
    for _ in range(2):  # prompts at least half as many as the decodes
        sched.add_request(make_request(1500))
    assert [s.num_new_tokens for s in sched.schedule().scheduled] == [1, 1, 1, 1, 1500, 544]


def test_a_step_target_never_cuts_prefill_below_the_minimum_chunk() -> None:
    sched = make_scheduler(max_num_batched_tokens=512, max_step_ms=10)
    sched.add_request(make_request(4, max_tokens=50))
    step(sched)
    sched.step_time.observe(num_decode_tokens=1, num_prefill_tokens=0, seconds=0.050)  # over it
    sched.step_time.observe(num_decode_tokens=0, num_prefill_tokens=400, seconds=0.400)
    sched.add_request(make_request(300))
    assert [s.num_new_tokens for s in sched.schedule().scheduled] == [1, MIN_PREFILL_CHUNK]


def test_without_decodes_a_step_target_leaves_the_whole_budget_to_prefill() -> None:
    sched = make_scheduler(max_num_batched_tokens=512, max_step_ms=100)
    sched.step_time.observe(num_decode_tokens=0, num_prefill_tokens=400, seconds=0.400)
    sched.add_request(make_request(300))
    assert [s.num_new_tokens for s in sched.schedule().scheduled] == [300]


def step(sched: Scheduler) -> None:
    out = sched.schedule()
    sched.update(out, fake_runner_output(out))


def test_a_waiting_request_counts_one_prefix_lookup_however_long_it_waits() -> None:
    sched = make_scheduler(max_num_seqs=1)
    sched.add_request(make_request(20, max_tokens=4))
    sched.add_request(make_request(30, max_tokens=4))
    run_to_completion(sched)
    assert scheduler_stats(sched).prefix_cache_queries == 20 + 30


def run_prompt_logprobs(sched: Scheduler, watched: Request) -> tuple[list[int], list[int]]:
    """Run every request to the end; the prompt-logprob counter of `watched` at each of its
    preemptions, and the rows that came out with its first token (their logprobs name them)."""
    counters: list[int] = []
    rows: list[int] = []
    while sched.has_unfinished_requests():
        out = sched.schedule()
        if watched.request_id in out.preempted_req_ids:
            counters.append(watched.num_computed_prompt_logprobs)
        for core in sched.update(out, fake_runner_output(out)):
            if core.request_id == watched.request_id and core.prompt_logprobs is not None:
                assert not rows, "prompt logprobs sent twice"
                assert core.prompt_logprobs.first_token_index == 1
                rows = [int(-row[0]) for row in core.prompt_logprobs.logprobs]
    return counters, rows


@pytest.mark.parametrize("enable_prefix_caching", [True, False])
def test_prompt_logprobs_survive_a_preemption_mid_prompt_once_each(
    enable_prefix_caching: bool,
) -> None:
    """Preempted with part of its prompt computed, a request's recompute neither repeats nor
    loses a prompt logprob (with prefix caching it finds its blocks up to the first still owed)."""
    sched = make_scheduler(
        num_blocks=7,
        block_size=16,
        max_model_len=128,
        max_num_batched_tokens=16,
        enable_prefix_caching=enable_prefix_caching,
    )
    old = make_request(20, max_tokens=60)
    sched.add_request(old)
    out = sched.schedule()
    sched.update(out, fake_runner_output(out))
    new = make_request(90, max_tokens=2, prompt_logprobs=0)
    sched.add_request(new)
    counters, rows = run_prompt_logprobs(sched, new)
    assert any(0 < c < 89 for c in counters), counters
    assert rows == list(range(1, 90))


def test_prompt_logprobs_after_the_prompt_are_not_computed_again_on_recompute() -> None:
    sched = make_scheduler(num_blocks=4, block_size=16, max_model_len=64)
    old = make_request(30, max_tokens=20)
    new = make_request(30, max_tokens=20, prompt_logprobs=1)
    sched.add_request(old)
    sched.add_request(new)
    counters, rows = run_prompt_logprobs(sched, new)
    assert counters and all(c == 29 for c in counters)
    assert rows == list(range(1, 30))


def test_a_request_owed_prompt_logprobs_takes_no_prefix_cache_hit() -> None:
    sched = make_scheduler(block_size=16)
    prompt = list(range(100, 164))
    run_to_completion_of(sched, make_request(prompt, max_tokens=1))
    asking, plain = make_request(prompt, prompt_logprobs=0), make_request(prompt)
    sched.add_request(asking)
    sched.add_request(plain)
    out = sched.schedule()
    assert [s.num_computed_tokens for s in out.scheduled] == [0, 48]
    assert [s.num_prompt_logprobs_rows for s in out.scheduled] == [63, 0]


def run_to_completion_of(sched: Scheduler, request: Request) -> None:
    sched.add_request(request)
    run_to_completion(sched)
