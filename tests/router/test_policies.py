"""Routing policies: pure rankings of candidates, every threshold from the config."""

from __future__ import annotations

from router.policies import RouteRequest, make_policy
from router.policies.prefix_aware import estimated_ttft_ms
from router.policies.session import SessionPolicy
from tests.router.factories import make_candidate, make_config

REQUEST = RouteRequest(num_prompt_tokens=1000)


def test_estimated_ttft_is_queued_work_plus_uncached_prefill() -> None:
    config = make_config(prefill_ms_per_token=0.5)
    candidate = make_candidate("a", cached_tokens=600, queued_tokens=200)
    assert estimated_ttft_ms(candidate, REQUEST, config) == 0.5 * (200 + 400)


def test_the_replica_holding_the_prefix_wins_over_idle_cold_ones() -> None:
    policy = make_policy(make_config())
    ranking = policy.rank(
        REQUEST,
        [make_candidate("cold"), make_candidate("warm", cached_tokens=800, queued_tokens=100)],
    )
    assert [c.url for c in ranking.order] == ["warm", "cold"]
    assert ranking.reason == "affinity"


def test_an_overloaded_affine_replica_loses_to_an_idle_cold_one() -> None:
    policy = make_policy(make_config())
    ranking = policy.rank(
        REQUEST,
        [make_candidate("cold"), make_candidate("warm", cached_tokens=800, queued_tokens=5000)],
    )
    assert ranking.order[0].url == "cold"


def test_the_balance_threshold_overrules_affinity_when_queues_diverge() -> None:
    candidates = [
        make_candidate("warm", cached_tokens=1000, queued_tokens=900),
        make_candidate("idle", queued_tokens=100),
    ]
    assert make_policy(make_config()).rank(REQUEST, candidates).order[0].url == "warm"
    strict = make_config(balance_abs_threshold_tokens=500, balance_rel_threshold=2.0)
    ranking = make_policy(strict).rank(REQUEST, candidates)
    assert (ranking.order[0].url, ranking.reason) == ("idle", "balance")


def test_a_nearly_full_kv_cache_is_a_last_resort() -> None:
    policy = make_policy(make_config(kv_usage_threshold=0.9))
    candidates = [
        make_candidate("full", cached_tokens=1000, kv_cache_usage=0.97),
        make_candidate("roomy"),
    ]
    assert policy.rank(REQUEST, candidates).order[0].url == "roomy"


def test_ties_are_broken_by_two_choices_toward_the_emptier_cache() -> None:
    policy = make_policy(make_config())
    candidates = [
        make_candidate("a", num_cached_blocks=50),
        make_candidate("b", num_cached_blocks=10),
    ]
    ranking = policy.rank(REQUEST, candidates)
    assert (ranking.order[0].url, ranking.reason) == ("b", "tie")


def test_a_tie_keeps_the_request_on_the_replica_computing_its_prefix() -> None:
    # A burst's second request: its prefix is pending on "warm", which is still prefilling the
    # first; the estimates tie, and the prefix must not be copied to an emptier replica.
    request = RouteRequest(num_prompt_tokens=212)
    candidates = [
        make_candidate("warm", cached_tokens=176, queued_tokens=213, num_cached_blocks=60),
        make_candidate("a", num_cached_blocks=10),
        make_candidate("b", queued_tokens=16, num_cached_blocks=10),
    ]
    for seed in range(20):
        ranking = make_policy(make_config(seed=seed)).rank(request, candidates)
        assert (ranking.order[0].url, ranking.reason) == ("warm", "affinity")


def test_tie_breaks_are_reproducible_from_the_seed() -> None:
    candidates = [make_candidate(u) for u in "abcdef"]
    first = [
        make_policy(make_config(seed=7)).rank(REQUEST, candidates).order[0].url for _ in range(5)
    ]
    again = [
        make_policy(make_config(seed=7)).rank(REQUEST, candidates).order[0].url for _ in range(5)
    ]
    assert first == again


def test_round_robin_takes_each_replica_in_turn() -> None:
    policy = make_policy(make_config(policy="round-robin"))
    candidates = [make_candidate(u) for u in "abc"]
    assert [policy.rank(REQUEST, candidates).order[0].url for _ in range(4)] == ["a", "b", "c", "a"]


def test_least_loaded_ignores_the_cache() -> None:
    policy = make_policy(make_config(policy="least-loaded"))
    candidates = [
        make_candidate("warm", cached_tokens=1000, queued_tokens=50),
        make_candidate("idle"),
    ]
    assert policy.rank(REQUEST, candidates).order[0].url == "idle"


def test_session_pins_a_key_to_one_replica_and_moves_only_its_sessions_when_one_leaves() -> None:
    policy = SessionPolicy(make_config(policy="session"))
    urls = [f"http://r{i}" for i in range(4)]
    keys = [f"user-{i}" for i in range(200)]
    before = {
        k: policy.rank(RouteRequest(10, k), [make_candidate(u) for u in urls]).order[0].url
        for k in keys
    }
    again = {
        k: policy.rank(RouteRequest(10, k), [make_candidate(u) for u in urls]).order[0].url
        for k in keys
    }
    assert before == again
    after = {
        k: policy.rank(RouteRequest(10, k), [make_candidate(u) for u in urls[1:]]).order[0].url
        for k in keys
    }
    moved = {k for k in keys if before[k] != after[k]}
    assert moved == {k for k in keys if before[k] == urls[0]}


def test_session_without_a_key_balances_by_load() -> None:
    policy = SessionPolicy(make_config(policy="session"))
    candidates = [make_candidate("busy", queued_tokens=500), make_candidate("idle")]
    assert policy.rank(RouteRequest(10), candidates).order[0].url == "idle"
