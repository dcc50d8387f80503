"""long_prefill_token_threshold (vLLM's rule): a prompt with more left than the threshold is
prefilled at most that many tokens a step, so a short request arriving during it starts in the
next step and decodes beside small chunks."""

import pytest

from engine.config import EngineConfig
from engine.core.request import Request
from engine.core.scheduler import Scheduler
from pagedock.errors import ConfigError
from tests.engine.factories import fake_runner_output, make_request, make_scheduler

BUDGET, THRESHOLD = 64, 16


def step(sched: Scheduler) -> list[tuple[str, int]]:
    """One step: what it scheduled, as (request id, tokens)."""
    out = sched.schedule()
    sched.update(out, fake_runner_output(out))
    return [(s.request_id, s.num_new_tokens) for s in out.scheduled]


def scheduler(threshold: int = THRESHOLD) -> Scheduler:
    return make_scheduler(
        max_model_len=1024, max_num_batched_tokens=BUDGET, long_prefill_token_threshold=threshold
    )


def test_a_long_prompt_alone_is_prefilled_in_chunks_of_the_threshold() -> None:
    sched = scheduler()
    long = make_request(40, max_tokens=1)
    sched.add_request(long)
    assert [step(sched) for _ in range(3)] == [[(long.request_id, n)] for n in (16, 16, 8)]


def long_then_short(sched: Scheduler) -> tuple[Request, Request]:
    """A 300-token prompt, one step of it, then a short request arriving."""
    long, short = make_request(300, max_tokens=1), make_request(10, max_tokens=3)
    sched.add_request(long)
    step(sched)
    sched.add_request(short)
    return long, short


def test_a_short_request_arriving_mid_prompt_starts_next_step_beside_capped_chunks() -> None:
    sched = scheduler()
    long, short = long_then_short(sched)
    assert step(sched) == [(long.request_id, THRESHOLD), (short.request_id, 10)]
    # The short request decodes beside chunks of the threshold, then the prompt is alone again.
    assert step(sched) == [(short.request_id, 1), (long.request_id, THRESHOLD)]
    assert step(sched) == [(short.request_id, 1), (long.request_id, THRESHOLD)]
    assert step(sched) == [(long.request_id, THRESHOLD)]


def test_without_a_threshold_the_newcomer_waits_for_the_prompt() -> None:
    sched = scheduler(threshold=0)
    long, _ = long_then_short(sched)
    assert step(sched) == [(long.request_id, BUDGET)]


def test_a_long_prompt_admitted_beside_running_requests_is_capped_from_its_first_chunk() -> None:
    sched = scheduler()
    running, long = make_request(10, max_tokens=5), make_request(300, max_tokens=1)
    sched.add_request(running)
    step(sched)
    sched.add_request(long)
    assert step(sched) == [(running.request_id, 1), (long.request_id, THRESHOLD)]


def test_prompts_under_the_threshold_are_not_cut() -> None:
    sched = scheduler()
    first, second = make_request(THRESHOLD, max_tokens=1), make_request(12, max_tokens=1)
    sched.add_request(first)
    sched.add_request(second)
    assert sorted(step(sched)) == sorted([(first.request_id, THRESHOLD), (second.request_id, 12)])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"long_prefill_token_threshold": -1}, "must be 0 or more"),
        (
            {"long_prefill_token_threshold": 8, "enable_chunked_prefill": False},
            "needs chunked prefill",
        ),
    ],
)
def test_a_bad_threshold_is_refused_by_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**settings)  # type: ignore[arg-type]
