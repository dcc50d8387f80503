"""A stream is resumed only on a replica serving the weights it began on (the same root hash),
never on another revision's, and not at all where the weights are unknown."""

from __future__ import annotations

from typing import Any

import httpx

from pagedock.kv.block_hash import root_hash
from router.http.stream_failover import StreamFailover
from router.http.stream_resume import Resumable, ResumePlan
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptBlocks
from router.metrics import RouterMetrics
from router.policies import make_policy
from router.policies.dispatcher import Dispatcher
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet
from tests.router.factories import make_config

REVISION_1 = root_hash("llama:torch.float32:w=1111")
REVISION_2 = root_hash("llama:torch.float32:w=2222")
TOKENS = list(range(1, 33))


def replica(url: str, root: bytes | None) -> Replica:
    r = Replica(url, block_size=16)
    r.root_hash = root
    return r


def failover(*replicas: Replica) -> tuple[StreamFailover, Resumable]:
    config = make_config(policy="round-robin")
    index = KVIndex()
    replica_set = ReplicaSet(config, index, httpx.AsyncClient(), RouterMetrics(config.policy))
    replica_set.replicas = {r.url: r for r in replicas}
    dispatcher = Dispatcher(config, replica_set, index, make_policy(config))
    decision = dispatcher.decide(PromptBlocks(TOKENS, len(TOKENS)))
    plan = ResumePlan.of({"prompt": TOKENS, "stream": True}, False)
    resumable = Resumable(None, {}, decision, plan)  # type: ignore[arg-type]
    return StreamFailover(dispatcher, replica_set, RouterMetrics("x"), no_exchange), resumable


async def no_exchange(*_: object) -> Any:
    raise AssertionError("choosing a replica sends nothing")


def test_only_a_replica_of_the_same_weights_resumes_the_stream() -> None:
    f, resumable = failover(
        replica("old-a", REVISION_1), replica("new-a", REVISION_2), replica("old-b", REVISION_1)
    )
    chosen = f._next_replica(resumable, ["old-a"], REVISION_1)
    assert chosen is not None and chosen[1].url == "old-b"
    assert f._next_replica(resumable, ["old-a", "old-b"], REVISION_1) is None


def test_a_replica_whose_weights_are_unknown_resumes_nothing() -> None:
    f, resumable = failover(replica("a", REVISION_1), replica("b", None))
    assert f._next_replica(resumable, ["a"], REVISION_1) is None
    assert f._next_replica(resumable, ["b"], None) is None
