"""Dispatcher: from a request's model and prompt blocks to a ranking of healthy replicas.

Candidates are the healthy replicas that serve the request's model (its `model` field: the base
model or a LoRA adapter, as their GET /v1/models lists it; router/replicas/served_models.py). It
builds each candidate's snapshot (longest cached run of the request's leading blocks, from the
index, on the adapter's own chain for an adapter; queued work, from the replica's report and the
router's own in-flight accounting; the adapter's load cost where it is not resident) and asks the
policy. The side effects of a decision — in-flight accounting and pending blocks — are applied by
`commit` when the proxy actually sends the request to a replica.

    model None (not named)            every healthy replica
    listed by healthy replicas        those
    listed by none, some lists unknown the replicas whose list is unknown (they may serve it)
    listed by a replica not ready     NoReplicaError (503: try again)
    listed by no replica              ModelNotServed (404 model_not_found)

`decide_fresh` re-reads the model lists before the 404 (ReplicaSet.refresh_models): an adapter
whose status just turned Ready is served at once, not after the next health check.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from router.config import RouterConfig
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptBlocks
from router.policies import Candidate, Policy, RouteRequest
from router.policies.base import with_first
from router.policies.decision_log import MAX_CANDIDATES, DecisionLog
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet

MAX_NAMES_SHOWN = 20
"""Models a 404 names (the replicas may serve hundreds of adapters)."""


class NoReplicaError(Exception):
    """No healthy replica to send the request to."""


class ModelNotServed(NoReplicaError):
    """Healthy replicas are up, and no replica serves the model the request names."""

    def __init__(self, model: str, served: list[str]) -> None:
        shown = ", ".join(repr(m) for m in served[:MAX_NAMES_SHOWN])
        more = f" and {len(served) - MAX_NAMES_SHOWN} more" if len(served) > MAX_NAMES_SHOWN else ""
        super().__init__(f"the model {model!r} does not exist; the replicas serve {shown}{more}")
        self.model = model


@dataclass
class Decision:
    replicas: list[Replica]
    """Healthy replicas, best first; the proxy tries them in this order."""
    candidates: dict[str, Candidate]
    reason: str
    blocks: PromptBlocks | None
    model: str | None = None
    """The model the request names (None: not named), for failover to choose among."""
    lora_name: str | None = None
    """The LoRA adapter it runs on (its model, when a replica lists that as an adapter)."""


class Dispatcher:
    def __init__(
        self, config: RouterConfig, replica_set: ReplicaSet, index: KVIndex, policy: Policy
    ) -> None:
        self.config = config
        self.replica_set = replica_set
        self.index = index
        self.policy = policy
        self.log = DecisionLog()
        """Recent decisions, for people (the router's /dashboard)."""

    def decide(
        self,
        blocks: PromptBlocks | None,
        session_key: str | None = None,
        among: Callable[[Replica], bool] | None = None,
        model: str | None = None,
        prefer: str | None = None,
    ) -> Decision:
        """Rank the healthy replicas that serve `model` (of those `among` admits, when given:
        the endpoint picker's subset hint) for a request; `prefer`, the replica that holds the
        request's conversation (router/policies/response_owners.py), goes first when it is one
        of them (reason `conversation`), the policy's ranking after it."""
        healthy = [r for r in self.replica_set.healthy() if among is None or among(r)]
        if not healthy:
            raise NoReplicaError("no healthy replica" if among is None else "no eligible replica")
        serving = self._serving(healthy, model)
        lora_name = self.lora_name(model)
        cached = self._cached_tokens(blocks, serving, lora_name)
        candidates = {r.url: self._candidate(r, cached[r.url], lora_name) for r in serving}
        num_prompt_tokens = blocks.num_prompt_tokens if blocks else 0
        ranking = self.policy.rank(
            RouteRequest(num_prompt_tokens, session_key), list(candidates.values())
        )
        order, reason = ranking.order, ranking.reason
        if prefer is not None and prefer in candidates:
            order, reason = with_first(candidates[prefer], order), "conversation"
        replicas = self.replica_set.replicas
        return Decision(
            [replicas[c.url] for c in order],
            candidates,
            reason,
            blocks,
            model,
            lora_name,
        )

    async def decide_fresh(
        self,
        blocks: PromptBlocks | None,
        session_key: str | None = None,
        among: Callable[[Replica], bool] | None = None,
        model: str | None = None,
        prefer: str | None = None,
    ) -> Decision:
        """`decide`, reading the replicas' model lists again before answering ModelNotServed."""
        try:
            return self.decide(blocks, session_key, among, model, prefer)
        except ModelNotServed:
            await self.replica_set.refresh_models()
        return self.decide(blocks, session_key, among, model, prefer)

    def lora_name(self, model: str | None) -> str | None:
        """`model` when a replica lists it as a LoRA adapter, else None (the base model)."""
        if model is None:
            return None
        listed = (r.served_models for r in self.replica_set.replicas.values())
        return model if any(s is not None and s.is_adapter(model) for s in listed) else None

    def commit(self, decision: Decision, replica: Replica, request_id: str) -> int:
        """The request goes to `replica`: count its work there and its blocks as pending.
        Returns the tokens it was predicted to find cached."""
        candidate = decision.candidates[replica.url]
        blocks = decision.blocks
        num_prompt_tokens = blocks.num_prompt_tokens if blocks else 0
        uncached_tokens = max(0, num_prompt_tokens - candidate.cached_tokens)
        replica.begin(request_id, uncached_tokens, decision.lora_name)
        root = replica.chain_root(decision.lora_name)
        prefix = None
        if blocks is not None and root is not None:
            hashes = blocks.hashes(root, self._block_size(replica))
            self.index.add_pending(replica.url, hashes, self.config.pending_prefix_ttl_s)
            prefix = hashes[0] if hashes else None
        ranked = [decision.candidates[r.url] for r in decision.replicas[:MAX_CANDIDATES]]
        self.log.record(
            request_id,
            replica.url,
            decision.reason,
            candidate.cached_tokens,
            num_prompt_tokens,
            prefix,
            ranked,
            decision.model,
        )
        return candidate.cached_tokens

    def _serving(self, healthy: list[Replica], model: str | None) -> list[Replica]:
        """The healthy replicas that serve `model` (see the table above)."""
        if model is None:
            return healthy
        listed = [
            r for r in healthy if r.served_models is not None and r.served_models.serves(model)
        ]
        unknown = [r for r in healthy if r.served_models is None]
        if listed or unknown:
            return listed or unknown
        everyone = self.replica_set.replicas.values()
        if any(r.served_models is not None and r.served_models.serves(model) for r in everyone):
            raise NoReplicaError(f"no healthy replica serves the model {model!r} yet")
        served = {m for r in healthy if r.served_models for m in r.served_models.cards}
        raise ModelNotServed(model, sorted(served))

    def _candidate(self, replica: Replica, cached_tokens: int, lora_name: str | None) -> Candidate:
        needs_load = lora_name is not None and not replica.holds_adapter(lora_name)
        return Candidate(
            url=replica.url,
            cached_tokens=cached_tokens,
            queued_tokens=replica.queued_tokens(self.config),
            num_cached_blocks=self.index.num_blocks(replica.url),
            kv_cache_usage=replica.load.kv_cache_usage,
            lora_load_ms=self.config.lora_load_ms if needs_load else 0.0,
        )

    def _cached_tokens(
        self, blocks: PromptBlocks | None, replicas: list[Replica], lora_name: str | None
    ) -> dict[str, int]:
        """Cached prefix tokens per replica, on the chain of the request's adapter (the base
        model's when None); one index walk per (root hash, block size) group."""
        cached = {r.url: 0 for r in replicas}
        if blocks is None:
            return cached
        groups: dict[tuple[bytes, int], list[str]] = defaultdict(list)
        for r in replicas:
            root = r.chain_root(lora_name)
            if root is not None:  # no snapshot yet: no affinity to claim
                groups[(root, self._block_size(r))].append(r.url)
        for (root, block_size), urls in groups.items():
            matched = self.index.match(blocks.hashes(root, block_size), urls)
            cached.update({url: n * block_size for url, n in matched.items()})
        return cached

    def _block_size(self, replica: Replica) -> int:
        return replica.block_size or self.config.block_size
