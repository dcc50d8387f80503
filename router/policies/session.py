"""session: requests with the same session key (a header or the `user` field) go to the same
replica, by rendezvous hashing — a consistent hash: when a replica leaves, only its own sessions
move, and each to the next replica of its own ranking. Requests without a key go least-loaded."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from router.config import RouterConfig
from router.policies.base import Candidate, Ranking, RouteRequest
from router.policies.least_loaded import LeastLoadedPolicy


def rendezvous_score(session_key: str, replica_url: str) -> int:
    digest = hashlib.blake2b(f"{session_key}\x00{replica_url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class SessionPolicy:
    name = "session"

    def __init__(self, config: RouterConfig) -> None:
        self.fallback = LeastLoadedPolicy(config)

    def rank(self, request: RouteRequest, candidates: Sequence[Candidate]) -> Ranking:
        key = request.session_key
        if key is None:
            return self.fallback.rank(request, candidates)
        ordered = sorted(candidates, key=lambda c: rendezvous_score(key, c.url), reverse=True)
        return Ranking(ordered, "session")
