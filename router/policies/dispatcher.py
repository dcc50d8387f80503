"""Dispatcher: from a request's prompt blocks to a ranking of healthy replicas.

It builds each candidate's snapshot (longest cached run of the request's leading blocks, from the
index; queued work, from the replica's report and the router's own in-flight accounting) and asks
the policy. The side effects of a decision — in-flight accounting and pending blocks — are applied
by `commit` when the proxy actually sends the request to a replica.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from router.config import RouterConfig
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptBlocks
from router.policies import Candidate, Policy, RouteRequest
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet


class NoReplicaError(Exception):
    """No healthy replica to send the request to."""


@dataclass
class Decision:
    replicas: list[Replica]
    """Healthy replicas, best first; the proxy tries them in this order."""
    candidates: dict[str, Candidate]
    reason: str
    blocks: PromptBlocks | None


class Dispatcher:
    def __init__(
        self, config: RouterConfig, replica_set: ReplicaSet, index: KVIndex, policy: Policy
    ) -> None:
        self.config = config
        self.replica_set = replica_set
        self.index = index
        self.policy = policy

    def decide(
        self,
        blocks: PromptBlocks | None,
        session_key: str | None = None,
        among: Callable[[Replica], bool] | None = None,
    ) -> Decision:
        """Rank the healthy replicas (those `among` admits, when given: the endpoint picker's
        subset hint) for a request."""
        healthy = [r for r in self.replica_set.healthy() if among is None or among(r)]
        if not healthy:
            raise NoReplicaError("no healthy replica" if among is None else "no eligible replica")
        cached = self._cached_tokens(blocks, healthy)
        candidates = {r.url: self._candidate(r, cached[r.url]) for r in healthy}
        num_prompt_tokens = blocks.num_prompt_tokens if blocks else 0
        ranking = self.policy.rank(
            RouteRequest(num_prompt_tokens, session_key), list(candidates.values())
        )
        replicas = self.replica_set.replicas
        return Decision(
            [replicas[c.url] for c in ranking.order], candidates, ranking.reason, blocks
        )

    def commit(self, decision: Decision, replica: Replica, request_id: str) -> int:
        """The request goes to `replica`: count its work there and its blocks as pending.
        Returns the tokens it was predicted to find cached."""
        candidate = decision.candidates[replica.url]
        blocks = decision.blocks
        num_prompt_tokens = blocks.num_prompt_tokens if blocks else 0
        replica.begin(request_id, max(0, num_prompt_tokens - candidate.cached_tokens))
        if blocks is not None and replica.root_hash is not None:
            hashes = blocks.hashes(replica.root_hash, self._block_size(replica))
            self.index.add_pending(replica.url, hashes, self.config.pending_prefix_ttl_s)
        return candidate.cached_tokens

    def _candidate(self, replica: Replica, cached_tokens: int) -> Candidate:
        return Candidate(
            url=replica.url,
            cached_tokens=cached_tokens,
            queued_tokens=replica.queued_tokens(self.config),
            num_cached_blocks=self.index.num_blocks(replica.url),
            kv_cache_usage=replica.load.kv_cache_usage,
        )

    def _cached_tokens(
        self, blocks: PromptBlocks | None, replicas: list[Replica]
    ) -> dict[str, int]:
        """Cached prefix tokens per replica; one index walk per (root hash, block size) group."""
        cached = {r.url: 0 for r in replicas}
        if blocks is None:
            return cached
        groups: dict[tuple[bytes, int], list[str]] = defaultdict(list)
        for r in replicas:
            if r.root_hash is not None:  # no snapshot yet: no affinity to claim
                groups[(r.root_hash, self._block_size(r))].append(r.url)
        for (root, block_size), urls in groups.items():
            matched = self.index.match(blocks.hashes(root, block_size), urls)
            cached.update({url: n * block_size for url, n in matched.items()})
        return cached

    def _block_size(self, replica: Replica) -> int:
        return replica.block_size or self.config.block_size
