"""The ring of recent routing decisions: bounded, newest first, filled by the dispatcher's commit
with the chosen replica, its reason, the predicted cached tokens, the prefix and the candidates."""

from __future__ import annotations

import httpx

from pagedock.kv.block_hash import hash_blocks, root_hash
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptBlocks
from router.metrics import RouterMetrics
from router.policies import make_policy
from router.policies.decision_log import MAX_CANDIDATES, DecisionLog
from router.policies.dispatcher import Dispatcher
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet
from tests.router.factories import make_candidate, make_config

ROOT = root_hash("tiny-llama")
BS = 16


def record(log: DecisionLog, request_id: str, replica: str = "a") -> None:
    log.record(request_id, replica, "load", 0, 10, None, [make_candidate(replica)])


def test_the_ring_keeps_the_newest_decisions_newest_first() -> None:
    log = DecisionLog(capacity=3)
    for i in range(5):
        record(log, f"r{i}")
    assert [d.request_id for d in log.recent()] == ["r4", "r3", "r2"]
    assert [d.request_id for d in log.recent(2)] == ["r4", "r3"]
    assert log.num_recorded == 5


def test_a_decision_keeps_at_most_a_few_candidates() -> None:
    log = DecisionLog()
    ranked = [make_candidate(f"r{i}") for i in range(MAX_CANDIDATES + 5)]
    log.record("x", "r0", "affinity", 32, 64, None, ranked)
    assert len(log.recent()[0].candidates) == MAX_CANDIDATES


def make_dispatcher() -> Dispatcher:
    config = make_config(block_size=BS)
    index = KVIndex()
    replica_set = ReplicaSet(config, index, httpx.AsyncClient(), RouterMetrics(config.policy))
    for url in ("http://a", "http://b"):
        replica = Replica(url, block_size=BS, root_hash=ROOT, kv_synced=True)
        replica_set.replicas[url] = replica
    index.store("http://a", hash_blocks(list(range(48)), BS, ROOT), parent=None)
    return Dispatcher(config, replica_set, index, make_policy(config))


def test_a_committed_request_is_logged_with_its_choice_reason_prefix_and_candidates() -> None:
    dispatcher = make_dispatcher()
    tokens = list(range(64))
    decision = dispatcher.decide(PromptBlocks(tokens, len(tokens)))
    chosen = decision.replicas[0]
    dispatcher.commit(decision, chosen, "req-1")
    [logged] = dispatcher.log.recent()
    assert logged.request_id == "req-1"
    assert logged.replica == chosen.url == "http://a"
    assert logged.reason == "affinity"
    assert logged.predicted_cached_tokens == 48
    assert logged.num_prompt_tokens == 64
    assert logged.prefix == hash_blocks(tokens, BS, ROOT)[0]
    assert [c.url for c in logged.candidates] == ["http://a", "http://b"]
    assert [c.cached_tokens for c in logged.candidates] == [48, 0]


def test_a_request_without_blocks_is_logged_without_a_prefix() -> None:
    dispatcher = make_dispatcher()
    decision = dispatcher.decide(None)
    dispatcher.commit(decision, decision.replicas[0], "req-2")
    assert dispatcher.log.recent()[0].prefix is None
