"""step_seed: a seeded request's draws are a function of (seed, position) alone, so a continuation
starts at its position at once (no replayed draws) and n > 1's child seeds give unrelated
streams."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from engine.core.scheduler_output import ScheduledRequest
from engine.inputs.sampling_params import SamplingParams
from engine.sampling.step_seed import step_seed
from engine.worker.model_runner import ModelRunner
from pagedock.limits import SEED_MAX, SEED_MIN


def test_the_same_seed_and_position_give_the_same_step_seed() -> None:
    assert step_seed(1234, 17) == step_seed(1234, 17)


def test_every_seed_in_range_gives_a_generator_seed() -> None:
    for seed in (SEED_MIN, -1, 0, 1, SEED_MAX):
        for position in (0, 1, 2**31):
            torch.Generator().manual_seed(step_seed(seed, position))  # no overflow


def test_positions_and_child_seeds_give_distinct_streams() -> None:
    # Child seeds are seed + index (parallel_sampling.child_seed): one child's stream must not be
    # its sibling's shifted by a step.
    seeds = {step_seed(seed, position) for seed in range(100, 108) for position in range(64)}
    assert len(seeds) == 8 * 64


def test_a_continuations_generator_is_seeded_for_its_position_without_replaying() -> None:
    runner = SimpleNamespace(generators={})  # what _generator_for reads of its runner
    prior = [5] * 8000  # a continuation 8,000 tokens in
    request = ScheduledRequest(
        "r", [1], 0, [0], True, SamplingParams(temperature=1.0, seed=7), [1], prior
    )
    gen = ModelRunner._generator_for(runner, request)  # type: ignore[arg-type]
    assert gen is not None
    expected = torch.Generator().manual_seed(step_seed(7, 8000))
    assert torch.equal(gen.get_state(), expected.get_state())
    prior.append(9)  # the next step: the same generator, seeded for the next position
    assert ModelRunner._generator_for(runner, request) is gen  # type: ignore[arg-type]
    assert torch.equal(gen.get_state(), expected.manual_seed(step_seed(7, 8001)).get_state())
