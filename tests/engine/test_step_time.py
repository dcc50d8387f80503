"""The step-cost model the step target sizes prefill chunks by."""

from __future__ import annotations

import pytest

from engine.core.step_time import MIN_MEASURED_PREFILL, StepTimeModel


def test_it_knows_nothing_until_a_prefill_was_measured() -> None:
    model = StepTimeModel()
    model.observe(num_decode_tokens=32, num_prefill_tokens=0, seconds=0.05)
    assert model.prefill_tokens_within(0.2) is None


def test_prefill_tokens_fit_in_what_the_decodes_leave_of_the_step() -> None:
    model = StepTimeModel()
    model.observe(num_decode_tokens=32, num_prefill_tokens=0, seconds=0.05)
    model.observe(num_decode_tokens=32, num_prefill_tokens=200, seconds=0.25)  # 1 ms a token
    assert model.prefill_token_s == pytest.approx(0.001)
    assert model.prefill_tokens_within(0.15) == 100


def test_a_slower_machine_is_followed_within_a_few_steps() -> None:
    model = StepTimeModel()
    model.observe(num_decode_tokens=0, num_prefill_tokens=100, seconds=0.1)
    for _ in range(15):
        model.observe(num_decode_tokens=0, num_prefill_tokens=100, seconds=0.3)
    assert model.prefill_token_s == pytest.approx(0.003, rel=0.05)


def test_tiny_prefill_pieces_do_not_teach_the_per_token_cost() -> None:
    model = StepTimeModel()
    model.observe(num_decode_tokens=4, num_prefill_tokens=MIN_MEASURED_PREFILL - 1, seconds=1.0)
    assert model.prefill_token_s is None


def test_decodes_slower_than_the_target_leave_no_room() -> None:
    model = StepTimeModel(decode_step_s=0.3, prefill_token_s=0.001)
    assert model.prefill_tokens_within(0.2) == 0
