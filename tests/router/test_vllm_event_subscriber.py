"""The router follows a vLLM replica's ZMQ KV events: dedupe by seq, replay on a gap, reset when
seq goes backwards, AllBlocksCleared drops the replica, blocks indexed by re-hashing token_ids.

The publisher here is a stand-in written from vLLM's protocol (msgpack [ts, events, dp_rank],
frames [topic, seq, payload], a ROUTER answering replays, then -1); the test decides which
batches reach the live stream, so gaps are exact.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgpack
import pytest
import pytest_asyncio
import zmq

from pagedock.errors import ConfigError
from pagedock.kv.block_hash import hash_blocks
from pagedock.kv.vllm_events import (
    StoredEvent,
    block_extra_keys,
    block_stored,
    chain_salt,
    decode_payload,
)
from router.kv.kv_index import KVIndex
from router.kv.prompt_hasher import PromptBlocks
from router.kv.vllm_event_subscriber import VllmEventSubscriber
from router.kv.vllm_kv_view import VLLM_ROOT, SeqTracker, VllmKVView, chain_root
from router.metrics import RouterMetrics
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet
from tests.eventually import eventually
from tests.router.factories import make_config
from tests.router.fake_replica import FakeReplica, ServerThread

BS = 4
TOKENS = list(range(1, 13))  # three blocks
PD = hash_blocks(TOKENS, BS, VLLM_ROOT)  # what the router must index


def stored(ids: list[int], parent: int | None, tokens: list[int], form: str = "map") -> Any:
    values = [ids, parent, tokens, BS, None, "GPU", None]
    if form == "array":
        return ["BlockStored", *values]
    keys = [
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    ]
    return {"type": "BlockStored", **dict(zip(keys, values, strict=True))}


def removed(ids: list[int]) -> Any:
    return {"type": "BlockRemoved", "block_hashes": ids, "medium": "GPU"}


CLEARED = {"type": "AllBlocksCleared"}


def payload(*events: Any, dp_rank: int | None = 0) -> bytes:
    batch = [1.0, list(events)] + ([] if dp_rank is None else [dp_rank])
    return msgpack.packb(batch)


# ---- the view and the seq bookkeeping, without sockets -------------------------------------


def make_view() -> tuple[VllmKVView, KVIndex]:
    index = KVIndex()
    return VllmKVView("r", index), index


def test_stored_blocks_are_indexed_under_pagedocks_hash_of_their_tokens() -> None:
    view, index = make_view()
    view.apply(decode_payload(payload(stored([901, 902], None, TOKENS[:8]))).events)
    view.apply(decode_payload(payload(stored([903], 902, TOKENS[8:], form="array"))).events)
    assert index.match(PD, ["r"]) == {"r": 3}


def test_removal_maps_the_opaque_id_back_to_the_hash() -> None:
    view, index = make_view()
    view.apply(decode_payload(payload(stored([901, 902, 903], None, TOKENS))).events)
    view.apply(decode_payload(payload(removed([902]))).events)
    assert index.match(PD, ["r"]) == {"r": 1}
    assert index.num_blocks("r") == 2


def test_a_store_whose_parent_is_unknown_is_counted_not_indexed() -> None:
    view, index = make_view()
    view.apply(decode_payload(payload(stored([903], 777, TOKENS[8:]))).events)
    assert index.num_blocks("r") == 0 and view.unchained_blocks == 1


def test_all_blocks_cleared_drops_the_replicas_entries() -> None:
    view, index = make_view()
    view.apply(decode_payload(payload(stored([901, 902, 903], None, TOKENS))).events)
    view.apply(decode_payload(payload(CLEARED, dp_rank=None)).events)
    assert index.num_blocks("r") == 0 and view.num_ids == 0


def test_bytes_hashes_and_other_tiers() -> None:
    view, index = make_view()
    view.apply(decode_payload(payload(stored([b"\x01" * 32], None, TOKENS[:4]))).events)
    cpu = {**stored([555], None, TOKENS[:4]), "medium": "CPU"}
    view.apply(decode_payload(payload(cpu)).events)
    assert index.num_blocks("r") == 1


def test_a_block_size_that_does_not_fit_the_tokens_is_an_error() -> None:
    view, _ = make_view()
    with pytest.raises(ValueError, match="token ids"):
        view.apply(decode_payload(payload(stored([901], None, TOKENS[:3]))).events)


def test_seq_tracker_classifies_live_batches() -> None:
    seq = SeqTracker()
    assert seq.classify_live(0) == "apply" and seq.accept(0)
    assert seq.classify_live(2) == "gap"
    assert seq.accept(1) and seq.accept(2)
    assert seq.classify_live(3) == "apply"
    assert seq.classify_live(3) == "restart"
    seq.restart()
    assert seq.accept(5) and seq.missed_batches == 5


# ---- live: a stand-in vLLM publisher on real sockets ---------------------------------------


class FakeVllmPublisher:
    """PUB + ROUTER on ephemeral ports; `publish` numbers batches, `live=False` keeps one off
    the live stream (only replay has it)."""

    def __init__(self, topic: bytes = b"kv@127.0.0.1:8000@m") -> None:
        ctx = zmq.Context.instance()
        self.topic = topic
        self.pub = ctx.socket(zmq.PUB)
        self.pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = ctx.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.buffer: list[tuple[int, bytes]] = []
        self.next_seq = 0
        self.replay_requests: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def publish(self, data: bytes, live: bool = True) -> int:
        with self._lock:
            seq = self.next_seq
            self.next_seq += 1
            self.buffer.append((seq, data))
            if live:
                self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), data])
        return seq

    def restart(self) -> None:
        with self._lock:
            self.buffer.clear()
            self.next_seq = 0

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.router.poll(20):
                continue
            with self._lock:
                client, empty, start = self.router.recv_multipart()
                first = int.from_bytes(start, "big")
                self.replay_requests.append(first)
                for seq, data in self.buffer:
                    if seq >= first:
                        self.router.send_multipart(
                            [client, empty, self.topic, seq.to_bytes(8, "big"), data]
                        )
                self.router.send_multipart(
                    [client, empty, b"", (-1).to_bytes(8, "big", signed=True), b""]
                )

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.pub.close(linger=0)
        self.router.close(linger=0)


@pytest_asyncio.fixture
async def running() -> AsyncIterator[tuple[FakeVllmPublisher, Replica, KVIndex]]:
    fake = FakeVllmPublisher()
    config = make_config(
        replica_kind="vllm",
        kv_events_port=fake.pub_port,
        kv_replay_port=fake.replay_port,
        event_backoff_max_s=0.05,
    )
    index, replica = KVIndex(), Replica("http://127.0.0.1:8000")
    subscriber = VllmEventSubscriber(replica, index, config, RouterMetrics("prefix-aware"))
    task = asyncio.create_task(subscriber.run())
    await eventually(lambda: replica.kv_synced)
    await subscription_up(fake, replica)
    yield fake, replica, index
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    fake.close()


async def subscription_up(fake: FakeVllmPublisher, replica: Replica) -> None:
    """ZMQ drops what is published before a subscription has propagated: publish empty batches
    until one arrives (the router replays any it missed)."""
    for _ in range(600):
        seq = fake.publish(payload())
        await asyncio.sleep(0.05)
        if replica.kv_seq >= seq:
            return
    raise AssertionError("the subscription never came up")


async def publish_until_seen(fake: FakeVllmPublisher, replica: Replica, data: bytes) -> None:
    seq = fake.publish(data)
    await eventually(lambda: replica.kv_seq >= seq, what=f"batch {seq} applied")


async def until(condition: Callable[[], bool]) -> None:
    await eventually(condition)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_live_batches_are_indexed_and_the_view_is_complete(running: Any) -> None:
    fake, replica, index = running
    await publish_until_seen(fake, replica, payload(stored([901, 902, 903], None, TOKENS)))
    assert index.match(PD, [replica.url]) == {replica.url: 3}
    assert replica.block_size == BS
    assert replica.kv_view() == {
        "source": "vllm-events",
        "complete": True,
        "missed_batches": 0,
        "unchained_blocks": 0,
    }


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_gap_is_replayed_then_duplicates_are_dropped(running: Any) -> None:
    fake, replica, index = running
    await publish_until_seen(fake, replica, payload(stored([901], None, TOKENS[:4])))
    lost = fake.publish(payload(stored([902], 901, TOKENS[4:8])), live=False)  # lost on the way
    await publish_until_seen(fake, replica, payload(stored([903], 902, TOKENS[8:])))
    assert fake.replay_requests[-1] == lost
    assert index.match(PD, [replica.url]) == {replica.url: 3}
    await publish_until_seen(fake, replica, payload(removed([903])))
    assert index.num_blocks(replica.url) == 2 and replica.kv_view()["complete"]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_seq_going_backwards_resets_the_replicas_view(running: Any) -> None:
    fake, replica, index = running
    await publish_until_seen(fake, replica, payload(stored([901, 902, 903], None, TOKENS)))
    await publish_until_seen(fake, replica, payload(removed([])))
    fake.restart()
    fake.publish(payload(stored([701], None, TOKENS[:4])))  # seq 0 of the new publisher
    await until(lambda: index.num_blocks(replica.url) == 1)
    assert index.match(PD, [replica.url]) == {replica.url: 1} and replica.kv_seq == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_all_blocks_cleared_drops_the_replica(running: Any) -> None:
    fake, replica, index = running
    await publish_until_seen(fake, replica, payload(stored([901, 902, 903], None, TOKENS)))
    await publish_until_seen(fake, replica, payload(CLEARED))
    assert index.num_blocks(replica.url) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_late_router_replays_the_buffer_and_says_what_it_lacks() -> None:
    fake = FakeVllmPublisher()
    try:
        fake.publish(payload(stored([901, 902], None, TOKENS[:8])), live=False)
        fake.publish(payload(stored([903], 902, TOKENS[8:])), live=False)
        del fake.buffer[0]  # the replay buffer no longer holds batch 0
        config = make_config(
            replica_kind="vllm", kv_events_port=fake.pub_port, kv_replay_port=fake.replay_port
        )
        index, replica = KVIndex(), Replica("http://127.0.0.1:8000")
        task = asyncio.create_task(
            VllmEventSubscriber(replica, index, config, RouterMetrics("x")).run()
        )
        await until(lambda: replica.kv_synced)
        assert fake.replay_requests == [0]
        assert replica.kv_view() == {
            "source": "vllm-events",
            "complete": False,
            "missed_batches": 1,
            "unchained_blocks": 1,
        }
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        fake.close()


def test_vllm_replicas_join_the_static_list_and_are_vllm_kind() -> None:
    config = make_config(
        replicas=["http://a:8000"], vllm_replicas=["b:8000", "http://c:8000@6001:0"]
    )
    assert config.replicas == ["http://a:8000", "http://b:8000", "http://c:8000"]
    assert config.is_vllm("http://b:8000") and not config.is_vllm("http://a:8000")
    assert config.kv_ports("http://b:8000") == (5557, 5558)
    assert config.kv_ports("http://c:8000") == (6001, 0)
    with pytest.raises(ConfigError, match="URL@EVENTS_PORT:REPLAY_PORT"):
        make_config(vllm_replicas=["http://c:8000@x"])
    assert make_config(replica_kind="vllm").is_vllm("http://a:8000")
    with pytest.raises(ConfigError, match="replica_kind"):
        make_config(replica_kind="sglang")


# ---- the path `pagedock route --replica-kind vllm` runs: through the replica set -------------


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_replica_set_follows_a_vllm_replicas_zmq_events() -> None:
    """ReplicaSet builds the vLLM subscriber for a vLLM replica. A bad merge once gave every
    replica pagedock's NDJSON subscriber, unseen because the only test of a vLLM fleet needs a
    real vLLM and skips in CI; this one needs only the stand-in publisher and an engine stand-in
    that answers health checks."""
    fake = FakeVllmPublisher()
    with ServerThread(FakeReplica().app) as server:
        config = make_config(
            replicas=[server.url],
            replica_kind="vllm",
            kv_events_port=fake.pub_port,
            kv_replay_port=fake.replay_port,
            event_backoff_max_s=0.05,
        )
        index = KVIndex()
        async with httpx.AsyncClient() as client:
            replicas = ReplicaSet(config, index, client, RouterMetrics("prefix-aware"))
            replicas.update([server.url])
            replica = replicas.replicas[server.url]
            try:
                assert isinstance(replicas._subscribers[server.url], VllmEventSubscriber)
                await eventually(lambda: replica.kv_synced, what="the replay answered")
                await subscription_up(fake, replica)
                await publish_until_seen(
                    fake, replica, payload(stored([901, 902, 903], None, TOKENS))
                )
                assert index.match(PD, [server.url]) == {server.url: 3}
                assert replica.kv_view()["source"] == "vllm-events"
            finally:
                await replicas.close()
                fake.close()


# ---- salted chains: the salt is in the first block's extra keys ----------------------------


def salted(event: dict[str, Any], *keys: list[str] | None) -> dict[str, Any]:
    return {**event, "extra_keys": list(keys)}


def test_a_salted_chain_is_indexed_from_the_salted_root() -> None:
    """vLLM names a request's cache_salt in its first block's extra keys; the router chains from
    the root salted with it, as a salted request's prompt is hashed (PromptBlocks)."""
    view, index = make_view()
    first = salted(stored([901, 902], None, TOKENS[:8]), ["tenant:a"], None)
    view.apply(decode_payload(payload(first)).events)
    view.apply(decode_payload(payload(stored([903], 902, TOKENS[8:], form="array"))).events)
    assert index.match(PD, ["r"]) == {"r": 0}  # not the unsalted chain
    salted_blocks = PromptBlocks(TOKENS, len(TOKENS), "tenant:a").hashes(VLLM_ROOT, BS)
    assert index.match(salted_blocks, ["r"]) == {"r": 3}


def test_an_adapters_salted_chain_names_the_adapter_then_the_salt() -> None:
    view, index = make_view()
    event = {**stored([901], None, TOKENS[:4]), "lora_id": 1, "lora_name": "sql"}
    view.apply(decode_payload(payload(salted(event, ["sql", "tenant:a"]))).events)
    blocks = PromptBlocks(TOKENS[:4], 4, "tenant:a").hashes(chain_root("sql"), BS)
    assert index.match(blocks, ["r"]) == {"r": 1}


def test_extra_keys_other_than_a_salt_leave_the_chain_unindexed() -> None:
    view, index = make_view()
    event = salted(stored([901], None, TOKENS[:4]), ["image-uuid", "tenant:a"])
    view.apply(decode_payload(payload(event)).events)
    assert index.num_blocks("r") == 0 and view.unchained_blocks == 1


def test_the_engine_names_the_salt_on_a_chains_first_block_only() -> None:
    assert block_extra_keys(2, True, None, None) is None  # unsalted: the field is left out
    assert block_extra_keys(2, True, None, "t") == [["t"], None]
    assert block_extra_keys(2, False, None, "t") == [None, None]
    assert block_extra_keys(2, True, "sql", "t") == [["sql", "t"], ["sql"]]
    event = block_stored([1, 2], None, TOKENS[:8], BS, extra_keys=[["t"], None])
    [decoded] = decode_payload(payload(event)).events
    assert isinstance(decoded, StoredEvent) and chain_salt(decoded) == "t"


def test_vllm_runs_are_grouped_by_their_chains_first_block() -> None:
    view, index = make_view()
    view.apply(decode_payload(payload(stored([901], None, TOKENS[:4]))).events)
    view.apply(decode_payload(payload(stored([901, 902, 903], None, TOKENS))).events)
    assert index.groups.counts("r", 10).groups == [(PD[0], 3)]
