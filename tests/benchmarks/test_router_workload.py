"""The pure parts of the SmolLM2 router scenario: workload construction, the arrival schedule,
KV sizing, and the percentile and goodput arithmetic (benchmarks/router_workload.py)."""

from __future__ import annotations

import itertools
import random

import pytest

from benchmarks.router_workload import (
    ChatTurn,
    Messages,
    WorkloadShape,
    chat_turns,
    common_prefix_tokens,
    goodput_share,
    kv_sizing,
    percentile,
    poisson_arrivals,
    system_prompts,
    ttft_target_s,
)


def encode(text: str) -> list[int]:
    """A stand-in tokenizer: one token per word."""
    return [hash(word) % 50_000 for word in text.split()]


def render(messages: Messages) -> list[int]:
    """A stand-in chat template: a role marker, then the content's tokens, per message."""
    ids: list[int] = []
    for m in messages:
        ids += [{"system": 1, "user": 2, "assistant": 3}[m["role"]], *encode(m["content"])]
    return [*ids, 3]


SHAPE = WorkloadShape(
    num_tenants=3, conversations_per_tenant=2, turns_per_conversation=4, system_prompt_tokens=100
)


def make_turns(seed: int = 0, shape: WorkloadShape = SHAPE) -> list[ChatTurn]:
    return chat_turns(encode, render, shape, seed)


def test_the_workload_has_every_turn_of_every_conversation_once() -> None:
    turns = make_turns()
    keys = [(t.tenant, t.conversation, t.turn) for t in turns]
    assert len(turns) == SHAPE.num_requests == 24
    assert sorted(keys) == [(t, c, k) for t in range(3) for c in range(2) for k in range(4)]


def test_a_conversation_s_turns_come_in_order_and_carry_the_earlier_turns() -> None:
    turns = make_turns()
    for tenant in range(3):
        for conversation in range(2):
            mine = [t for t in turns if (t.tenant, t.conversation) == (tenant, conversation)]
            assert [t.turn for t in mine] == [0, 1, 2, 3]
            for earlier, later in itertools.pairwise(mine):
                assert later.messages[: len(earlier.messages)] == earlier.messages
                assert [m["role"] for m in later.messages[len(earlier.messages) :]] == [
                    "assistant",
                    "user",
                ]


def test_conversations_are_interleaved_not_sent_one_after_another() -> None:
    turns = make_turns()
    first_six = {(t.tenant, t.conversation) for t in turns[:6]}
    assert len(first_six) > 1


def test_tenants_share_their_system_prompt_and_nothing_with_other_tenants() -> None:
    turns = make_turns()
    systems = {t.tenant: t.messages[0]["content"] for t in turns}
    assert all(t.messages[0]["content"] == systems[t.tenant] for t in turns)
    assert len(set(systems.values())) == 3
    first_words = {s.split(".")[0] for s in systems.values()}
    assert len(first_words) == 3  # the tenant's name leads: no shared first KV block


def test_system_prompts_are_at_least_the_asked_length() -> None:
    prompts = system_prompts(encode, random.Random(0), 4, 250)
    assert all(len(encode(p)) >= 250 for p in prompts)


def test_the_token_ids_are_the_rendered_messages() -> None:
    for t in make_turns():
        assert t.token_ids == render(t.messages)


def test_the_same_seed_gives_the_same_workload_and_another_seed_another() -> None:
    assert [t.messages for t in make_turns(1)] == [t.messages for t in make_turns(1)]
    assert [t.messages for t in make_turns(1)] != [t.messages for t in make_turns(2)]


def test_the_common_prefix_is_what_each_tenant_s_turns_share_at_the_least() -> None:
    turns = [
        ChatTurn(0, 0, 0, [], [1, 2, 3, 4]),
        ChatTurn(0, 1, 0, [], [1, 2, 3, 5]),
        ChatTurn(1, 0, 0, [], [9, 8, 7, 6, 5]),
        ChatTurn(1, 0, 1, [], [9, 8, 7, 6, 5, 4]),
    ]
    assert common_prefix_tokens(turns) == 3  # tenant 0 shares 3 tokens, tenant 1 shares 5


def test_the_common_prefix_of_the_workload_covers_every_system_prompt() -> None:
    turns = make_turns()
    assert common_prefix_tokens(turns) > min(len(render([t.messages[0]])) for t in turns) - 1


def test_poisson_arrivals_start_at_zero_and_rise() -> None:
    offsets = poisson_arrivals(2.0, 200, seed=3)
    assert offsets[0] == 0.0
    assert all(b > a for a, b in itertools.pairwise(offsets))


def test_poisson_arrivals_are_the_same_for_the_same_seed_and_scale_with_the_rate() -> None:
    assert poisson_arrivals(2.0, 50, seed=3) == poisson_arrivals(2.0, 50, seed=3)
    assert poisson_arrivals(2.0, 50, seed=3) != poisson_arrivals(2.0, 50, seed=4)
    slow, fast = poisson_arrivals(1.0, 50, seed=3), poisson_arrivals(4.0, 50, seed=3)
    assert fast == pytest.approx([s / 4 for s in slow])


def test_poisson_arrivals_average_the_asked_rate() -> None:
    offsets = poisson_arrivals(5.0, 20_001, seed=0)
    assert 20_000 / offsets[-1] == pytest.approx(5.0, rel=0.05)


def test_a_non_positive_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="arrival rate must be positive"):
        poisson_arrivals(0.0, 10, seed=0)


def test_kv_sizing_holds_half_the_tenants_prefixes_plus_the_working_set() -> None:
    turns = make_turns()
    prefix = common_prefix_tokens(turns)
    sizing = kv_sizing(turns, prefix, max_tokens=24, in_flight_per_replica=4, block_size=16)
    longest = max(len(t.token_ids) for t in turns) + 24
    assert sizing.prefix_blocks == prefix // 16
    assert sizing.tail_blocks == -(-longest // 16) - prefix // 16
    assert (
        sizing.num_kv_blocks == 2 * sizing.prefix_blocks + 4 * sizing.tail_blocks
    )  # ceil(3/2) = 2
    assert "3 tenants" in sizing.reasoning


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 90) == 90.0
    assert percentile(values, 99) == 99.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_goodput_counts_requests_within_the_target_and_failures_against_it() -> None:
    assert goodput_share([0.1, 0.2, 0.5, None], target_s=0.2) == 0.5
    assert goodput_share([0.1, 0.1], target_s=0.05) == 0.0
    assert goodput_share([], target_s=1.0) != goodput_share([], target_s=1.0)  # NaN


def test_the_ttft_target_is_twice_the_median_unloaded_hit() -> None:
    assert ttft_target_s([0.05, 0.07, 0.06]) == pytest.approx(0.12)
    assert ttft_target_s([0.05], factor=3.0) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="no unloaded hit"):
        ttft_target_s([])
