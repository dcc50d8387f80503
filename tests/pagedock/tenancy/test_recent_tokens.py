"""RecentTokens: tokens served lately, halving every half-life; a tenant well under an equal share
of them (pagedock/tenancy/recent_tokens.py)."""

from __future__ import annotations

import pytest

from pagedock.tenancy.recent_tokens import RecentTokens


def test_a_count_halves_every_half_life() -> None:
    recent = RecentTokens(half_life_s=10.0)
    recent.add("a", 100, now=0.0)
    assert recent.count("a", 10.0) == pytest.approx(50.0)
    recent.add("a", 50, now=10.0)
    assert recent.count("a", 30.0) == pytest.approx(25.0)
    assert recent.count("nobody", 30.0) == 0.0


def test_well_below_share_is_under_half_an_equal_share() -> None:
    recent = RecentTokens()
    recent.add("heavy", 900, now=0.0)
    recent.add("light", 100, now=0.0)
    assert recent.well_below_share("light", {"heavy"}, now=0.0)  # 100 < 1000 / 2 / 2
    assert not recent.well_below_share("heavy", {"light"}, now=0.0)
    recent.add("light", 300, now=0.0)  # 400 of 1300: under its share, not well under
    assert not recent.well_below_share("light", {"heavy"}, now=0.0)
    assert recent.well_below_share("new", {"heavy", "light"}, now=0.0)  # served nothing lately


def test_a_tenant_alone_or_before_anyone_was_served_is_never_below() -> None:
    recent = RecentTokens()
    assert not recent.well_below_share("a", {"b"}, now=0.0)  # 0 of 0
    recent.add("a", 10, now=0.0)
    assert not recent.well_below_share("a", set(), now=0.0)
    assert not recent.well_below_share("a", {"a"}, now=0.0)
