"""LoRA adapter routing in the dispatcher: only replicas serving the request's model are
candidates, prefix hits count on the adapter's own chain (pagedock and vLLM-format events alike),
and the cost model charges the adapter's load where it is served but not resident."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pagedock.errors import ConfigError
from pagedock.kv.block_hash import hash_blocks, lora_root_hash, root_hash
from pagedock.kv.vllm_events import StoredEvent
from router.http.stream_failover import StreamFailover
from router.http.stream_resume import Resumable, ResumePlan
from router.kv.event_subscriber import EventSubscriber
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptBlocks
from router.kv.vllm_kv_view import VllmKVView, chain_root
from router.metrics import RouterMetrics
from router.policies import make_policy
from router.policies.dispatcher import Dispatcher, ModelNotServed, NoReplicaError
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet
from router.replicas.served_models import ServedModels
from tests.router.factories import make_config

BS = 16
ROOT = root_hash("tiny-llama")
TOKENS = list(range(1, 65))  # four full blocks
BASE = "base"


def replica(
    url: str,
    *adapters: str,
    resident: list[str] | None = None,
    kind: str = "pagedock",
    listed: bool = True,
) -> Replica:
    """A healthy replica serving the base model and `adapters`; `resident`: what its
    vllm:lora_requests_info reports running (None: not reported)."""
    r = Replica(url, kind=kind, block_size=BS)
    r.root_hash = chain_root(None) if kind == "vllm" else ROOT
    if listed:
        cards: dict[str, dict[str, Any]] = {BASE: {"id": BASE, "parent": None}}
        cards.update({a: {"id": a, "parent": BASE, "root": f"/adapters/{a}"} for a in adapters})
        r.served_models = ServedModels(cards)
    if resident is not None:
        r.load.running_lora_adapters = tuple(resident)
    return r


def dispatcher(*replicas: Replica, **config: Any) -> Dispatcher:
    cfg = make_config(**config)
    index = KVIndex()
    replica_set = ReplicaSet(cfg, index, httpx.AsyncClient(), RouterMetrics(cfg.policy))
    replica_set.replicas = {r.url: r for r in replicas}
    return Dispatcher(cfg, replica_set, index, make_policy(cfg))


def prompt() -> PromptBlocks:
    return PromptBlocks(list(TOKENS), len(TOKENS))


def urls(replicas: list[Replica]) -> list[str]:
    return [r.url for r in replicas]


@pytest.mark.parametrize("policy", ["prefix-aware", "round-robin", "least-loaded", "session"])
def test_an_adapters_requests_go_only_to_replicas_serving_it(policy: str) -> None:
    d = dispatcher(replica("a", "sql"), replica("b"), replica("c", "sql", "chat"), policy=policy)
    for _ in range(4):
        decision = d.decide(prompt(), "user-1", model="sql")
        assert sorted(urls(decision.replicas)) == ["a", "c"]
        assert decision.lora_name == "sql"
    assert sorted(urls(d.decide(prompt(), model=BASE).replicas)) == ["a", "b", "c"]
    assert d.decide(prompt(), model=None).lora_name is None


def test_a_prefix_hit_counts_on_the_adapters_own_chain_only() -> None:
    d = dispatcher(replica("base-warm", "sql"), replica("sql-warm", "sql"))
    d.index.store("base-warm", hash_blocks(TOKENS, BS, ROOT))
    d.index.store("sql-warm", hash_blocks(TOKENS, BS, lora_root_hash(ROOT, "sql")))
    for_sql = d.decide(prompt(), model="sql")
    assert (for_sql.replicas[0].url, for_sql.reason) == ("sql-warm", "affinity")
    assert for_sql.candidates["base-warm"].cached_tokens == 0
    assert for_sql.candidates["sql-warm"].cached_tokens == len(TOKENS)
    for_base = d.decide(prompt(), model=None)
    assert for_base.replicas[0].url == "base-warm"
    assert for_base.candidates["sql-warm"].cached_tokens == 0


def test_the_load_cost_is_charged_where_the_adapter_is_served_but_not_resident() -> None:
    d = dispatcher(replica("loaded", "sql", resident=["sql"]), replica("cold", "sql", resident=[]))
    decision = d.decide(prompt(), model="sql")
    assert decision.candidates["cold"].lora_load_ms == d.config.lora_load_ms == 20.0
    assert decision.candidates["loaded"].lora_load_ms == 0.0
    assert decision.replicas[0].url == "loaded"
    assert d.decide(prompt(), model=None).candidates["cold"].lora_load_ms == 0.0


def test_the_replica_with_the_adapter_loaded_and_its_prefix_wins() -> None:
    d = dispatcher(
        replica("loaded-cold-cache", "sql", resident=["sql"]),
        replica("unloaded-warm-cache", "sql", resident=[]),
        replica("loaded-warm-cache", "sql", resident=["sql", "chat"]),
        lora_load_ms=50.0,
    )
    adapter_blocks = hash_blocks(TOKENS, BS, lora_root_hash(ROOT, "sql"))
    d.index.store("unloaded-warm-cache", adapter_blocks)
    d.index.store("loaded-warm-cache", adapter_blocks)
    decision = d.decide(prompt(), model="sql")
    assert urls(decision.replicas) == [
        "loaded-warm-cache",
        "loaded-cold-cache",  # 6.4 ms of prefill beats a 50 ms load
        "unloaded-warm-cache",
    ]


def test_an_adapter_loaded_again_with_other_weights_is_hashed_from_its_listed_root() -> None:
    """A pagedock engine that loaded `sql` again from other weights chains its requests from a
    root of their own and lists it in /v1/models (`kv_root_hash`): its blocks are found there,
    and a replica listing nothing keeps the root derived from the name."""
    reloaded = replica("reloaded", "sql", resident=["sql"])
    new_root = lora_root_hash(ROOT, "sql\x00other-weights")
    assert reloaded.served_models is not None
    cards = dict(reloaded.served_models.cards)
    cards["sql"] = {**cards["sql"], "kv_root_hash": new_root.hex()}
    reloaded.served_models = ServedModels(cards)
    first = replica("first-load", "sql", resident=["sql"])
    d = dispatcher(reloaded, first)
    assert reloaded.chain_root("sql") == new_root
    assert first.chain_root("sql") == lora_root_hash(ROOT, "sql")
    d.index.store("reloaded", hash_blocks(TOKENS, BS, new_root))
    decision = d.decide(prompt(), model="sql")
    assert decision.replicas[0].url == "reloaded"
    assert decision.candidates["reloaded"].cached_tokens == len(TOKENS)
    for bad in ("zz", "ab" * 8, 7):  # not hex, not 32 bytes, not a string
        cards["sql"] = {**cards["sql"], "kv_root_hash": bad}
        reloaded.served_models = ServedModels(cards)
        assert reloaded.chain_root("sql") == lora_root_hash(ROOT, "sql")


def test_residency_reported_nowhere_charges_no_load_and_zero_turns_it_off() -> None:
    unreported = dispatcher(replica("a", "sql"), replica("b", "sql"))
    assert {
        c.lora_load_ms for c in unreported.decide(prompt(), model="sql").candidates.values()
    } == {0.0}
    off = dispatcher(replica("a", "sql", resident=[]), lora_load_ms=0.0)
    assert off.decide(prompt(), model="sql").candidates["a"].lora_load_ms == 0.0


def test_a_request_in_flight_for_the_adapter_counts_it_as_resident() -> None:
    d = dispatcher(replica("a", "sql", resident=[]), replica("b", "sql", resident=[]))
    first = d.decide(prompt(), model="sql")
    chosen = first.replicas[0]
    d.commit(first, chosen, "r1")
    second = d.decide(prompt(), model="sql")
    assert second.candidates[chosen.url].lora_load_ms == 0.0
    assert second.replicas[0].url == chosen.url  # it holds the adapter and (pending) its prefix
    chosen.end("r1")
    assert d.decide(prompt(), model="sql").candidates[chosen.url].lora_load_ms == 20.0


def test_committed_blocks_are_pending_on_the_adapters_chain() -> None:
    d = dispatcher(replica("a", "sql"))
    decision = d.decide(prompt(), model="sql")
    d.commit(decision, decision.replicas[0], "r1")
    on_adapter = hash_blocks(TOKENS, BS, lora_root_hash(ROOT, "sql"))
    assert d.index.match(on_adapter, ["a"]) == {"a": 4}
    assert d.index.match(hash_blocks(TOKENS, BS, ROOT), ["a"]) == {"a": 0}


def test_a_model_no_ready_replica_lists_is_model_not_served() -> None:
    d = dispatcher(replica("a", "sql"), replica("b", "chat"))
    with pytest.raises(ModelNotServed) as raised:
        d.decide(prompt(), model="nope")
    message = str(raised.value)
    assert "'nope' does not exist" in message and "'sql'" in message and "'chat'" in message


def test_a_model_only_a_warming_replica_serves_is_a_wait_not_a_404() -> None:
    warming = replica("w", "sql")
    warming.warming = True
    d = dispatcher(replica("a"), warming)
    with pytest.raises(NoReplicaError) as raised:
        d.decide(prompt(), model="sql")
    assert not isinstance(raised.value, ModelNotServed)


def test_replicas_whose_list_is_unknown_are_tried_only_when_no_listed_one_serves_it() -> None:
    d = dispatcher(replica("listed", "sql"), replica("unknown", listed=False))
    assert urls(d.decide(prompt(), model="sql").replicas) == ["listed"]
    assert urls(d.decide(prompt(), model="other").replicas) == ["unknown"]
    assert sorted(urls(d.decide(prompt(), model=None).replicas)) == ["listed", "unknown"]


def test_a_replica_that_refused_the_model_leaves_its_candidates() -> None:
    a, b = replica("a", "sql"), replica("b", "sql")
    d = dispatcher(a, b)
    a.forget_model("sql")
    assert urls(d.decide(prompt(), model="sql").replicas) == ["b"]
    assert a.served_models is not None and a.served_models.serves(BASE)


def test_the_adapters_chain_from_pagedock_events_matches_the_request() -> None:
    d = dispatcher(replica("a", "sql"), replica("b", "sql"))
    subscriber = EventSubscriber(
        d.replica_set.replicas["b"], d.index, httpx.AsyncClient(), d.config, RouterMetrics("x")
    )
    # A pagedock engine publishes h_0 and chains an adapter's blocks from lora_root_hash.
    subscriber.apply(
        {
            "type": "snapshot",
            "instance_id": "i1",
            "seq": 0,
            "block_size": BS,
            "root_hash": ROOT.hex(),
            "block_hashes": [h.hex() for h in hash_blocks(TOKENS, BS, lora_root_hash(ROOT, "sql"))],
        }
    )
    decision = d.decide(prompt(), model="sql")
    assert (decision.replicas[0].url, decision.candidates["b"].cached_tokens) == ("b", 64)
    assert d.decide(prompt(), model=None).candidates["b"].cached_tokens == 0


def test_the_adapters_chain_from_vllm_events_matches_the_request() -> None:
    d = dispatcher(replica("a", "sql", kind="vllm"), replica("b", "sql", kind="vllm"))
    stored = StoredEvent([11, 12, 13, 14], None, list(TOKENS), BS, lora_name="sql")
    VllmKVView("b", d.index).apply([stored])
    decision = d.decide(prompt(), model="sql")
    assert (decision.replicas[0].url, decision.candidates["b"].cached_tokens) == ("b", 64)
    assert d.decide(prompt(), model=None).candidates["b"].cached_tokens == 0


async def no_exchange(*_: object) -> Any:
    raise AssertionError("choosing a replica sends nothing")


def test_a_stream_is_resumed_only_on_a_replica_serving_its_adapter() -> None:
    d = dispatcher(replica("failed", "sql"), replica("base-only"), replica("also-sql", "sql"))
    decision = d.decide(prompt(), model="sql")
    failover = StreamFailover(d, d.replica_set, RouterMetrics("x"), no_exchange)
    plan = ResumePlan.of({"model": "sql", "prompt": TOKENS, "stream": True}, False)
    resumable = Resumable(None, {}, decision, plan)  # type: ignore[arg-type]
    chosen = failover._next_replica(resumable, ["failed"], ROOT)
    assert chosen is not None and chosen[1].url == "also-sql"
    assert failover._next_replica(resumable, ["failed", "also-sql"], ROOT) is None


def test_a_negative_lora_load_cost_is_refused() -> None:
    with pytest.raises(ConfigError, match="lora_load_ms"):
        make_config(lora_load_ms=-1.0)
