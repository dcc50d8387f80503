"""Routing policies, chosen by name (`--policy`)."""

from __future__ import annotations

from router.config import RouterConfig
from router.policies.base import Candidate, Policy, Ranking, RouteRequest
from router.policies.least_loaded import LeastLoadedPolicy
from router.policies.prefix_aware import PrefixAwarePolicy
from router.policies.round_robin import RoundRobinPolicy
from router.policies.session import SessionPolicy

__all__ = ["Candidate", "Policy", "Ranking", "RouteRequest", "make_policy"]


def make_policy(config: RouterConfig) -> Policy:
    policies: dict[str, type[Policy]] = {
        "prefix-aware": PrefixAwarePolicy,
        "round-robin": RoundRobinPolicy,
        "least-loaded": LeastLoadedPolicy,
        "session": SessionPolicy,
    }
    return policies[config.policy](config)  # type: ignore[call-arg]
