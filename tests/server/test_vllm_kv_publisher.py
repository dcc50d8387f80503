"""The engine's vLLM-format KV events are what vLLM's own consumers decode.

The decoder here is written from vLLM 0.32's structs (vllm/distributed/kv_events.py: msgspec
Structs, `tag=True`, the batch `array_like`), not from pagedock's encoder: if pagedock's bytes
decode into these, llm-d / Dynamo / vLLM's example subscriber read them too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import zmq

from engine.core.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from engine.server.kv_events.vllm_publisher import VllmKVPublisher
from pagedock.errors import ConfigError
from pagedock.kv.block_hash import hash_blocks
from pagedock.kv.vllm_events import KVEventsConfig, is_bind_endpoint, to_uint64

ExternalBlockHash = bytes | int


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class VStored(KVCacheEvent, tag="BlockStored"):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class VRemoved(KVCacheEvent, tag="BlockRemoved"):
    block_hashes: list[ExternalBlockHash]
    medium: str | None


class VCleared(KVCacheEvent, tag="AllBlocksCleared"):
    pass


class VBatch(EventBatch):
    events: list[VStored | VRemoved | VCleared]


# The older positional form: the same structs, `array_like=True` on the events too.
class KVCacheEventArray(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class AStored(KVCacheEventArray, tag="BlockStored"):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class ARemoved(KVCacheEventArray, tag="BlockRemoved"):
    block_hashes: list[ExternalBlockHash]
    medium: str | None


class ACleared(KVCacheEventArray, tag="AllBlocksCleared"):
    pass


class ABatch(EventBatch):
    events: list[AStored | ARemoved | ACleared]


ROOT = b"\x01" * 32
TOKENS = list(range(100, 148))  # three blocks of 16
H = hash_blocks(TOKENS, 16, ROOT)


def engine_batches() -> list[KVEventBatch]:
    return [
        KVEventBatch(0, 1.5, [BlockStored(H[:2], None, 16, TOKENS[:32])]),
        KVEventBatch(1, 2.5, [BlockStored(H[2:], H[1], 16, TOKENS[32:]), BlockRemoved([H[0]])]),
        KVEventBatch(2, 3.5, [AllBlocksCleared()]),
    ]


def make_publisher(**overrides: Any) -> VllmKVPublisher:
    config = KVEventsConfig(
        enable_kv_cache_events=True,
        endpoint="tcp://127.0.0.1:*",
        replay_endpoint="tcp://127.0.0.1:*",
        topic="kv@10.0.0.5:8000@tiny",
        **overrides,
    )
    return VllmKVPublisher(config)


@pytest.fixture
def publisher() -> Iterator[VllmKVPublisher]:
    p = make_publisher()
    yield p
    p.close()


def subscribe(endpoint: str, topic: bytes = b"") -> zmq.Socket[bytes]:
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(endpoint)
    return sub


def publish_until_received(
    publisher: VllmKVPublisher, sub: zmq.Socket[bytes], batches: list[KVEventBatch]
) -> list[list[bytes]]:
    """PUB drops messages until the subscription has propagated (ZMQ's slow joiner): publish a
    probe batch until one arrives, then the batches under test, and return every frame set after
    the probes."""
    probe = KVEventBatch(0, 0.0, [AllBlocksCleared()])
    deadline = time.monotonic() + 30
    while not sub.poll(100):
        assert time.monotonic() < deadline, "no message reached the subscriber"
        publisher.on_batches([probe])
    sub.recv_multipart()
    while sub.poll(300):
        sub.recv_multipart()  # probes still in flight
    publisher.on_batches(batches)
    frames = []
    for _ in batches:
        assert sub.poll(30_000), "a published batch did not arrive"
        frames.append(sub.recv_multipart())
    return frames


def test_map_form_decodes_with_vllms_structs(publisher: VllmKVPublisher) -> None:
    sub = subscribe(publisher.endpoints[0])
    frames = publish_until_received(publisher, sub, engine_batches())
    topic, seq, payload = frames[0]
    assert topic == b"kv@10.0.0.5:8000@tiny"
    assert len(seq) == 8
    batch = msgspec.msgpack.decode(payload, type=VBatch)
    assert batch.ts == 1.5 and batch.data_parallel_rank == 0
    assert batch.events == [
        VStored([to_uint64(h) for h in H[:2]], None, TOKENS[:32], 16, None, "GPU", None)
    ]
    second = msgspec.msgpack.decode(frames[1][2], type=VBatch).events
    assert second == [
        VStored([to_uint64(H[2])], to_uint64(H[1]), TOKENS[32:], 16, None, "GPU", None),
        VRemoved([to_uint64(H[0])], "GPU"),
    ]
    assert msgspec.msgpack.decode(frames[2][2], type=VBatch).events == [VCleared()]
    sub.close()


def test_events_are_maps_tagged_type_with_every_field_sent(publisher: VllmKVPublisher) -> None:
    sub = subscribe(publisher.endpoints[0])
    frames = publish_until_received(publisher, sub, engine_batches()[:1])
    raw = msgspec.msgpack.decode(frames[0][2])
    assert len(raw) == 3
    assert set(raw[1][0]) == {
        "type",
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    }
    assert all(0 <= h < 2**64 for h in raw[1][0]["block_hashes"])
    sub.close()


def test_array_form_decodes_with_the_positional_structs() -> None:
    publisher = make_publisher(event_encoding="array")
    try:
        sub = subscribe(publisher.endpoints[0])
        frames = publish_until_received(publisher, sub, engine_batches())
        events = [e for f in frames for e in msgspec.msgpack.decode(f[2], type=ABatch).events]
        assert [type(e) for e in events] == [AStored, AStored, ARemoved, ACleared]
        assert events[1].parent_block_hash == to_uint64(H[1])
        sub.close()
    finally:
        publisher.close()


class VStoredSalted(KVCacheEvent, tag="BlockStored"):
    """vLLM's BlockStored with its per-block `extra_keys` (the adapter's name, then a chain's
    first block's cache_salt)."""

    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[list[str] | None] | None = None


class VSaltedBatch(EventBatch):
    events: list[VStoredSalted | VRemoved | VCleared]


def test_a_salted_chain_names_its_salt_in_the_first_blocks_extra_keys(
    publisher: VllmKVPublisher,
) -> None:
    """A consumer that re-hashes token ids needs the salt the engine chained them from; an
    unsalted chain's events are as before (no extra_keys)."""
    first = BlockStored(H[:2], None, 16, TOKENS[:32], 1, "sql", cache_salt="tenant:a")
    later = BlockStored(H[2:], H[1], 16, TOKENS[32:], cache_salt="tenant:a")
    sub = subscribe(publisher.endpoints[0])
    [frames] = publish_until_received(publisher, sub, [KVEventBatch(0, 1.0, [first, later])])
    events = msgspec.msgpack.decode(frames[2], type=VSaltedBatch).events
    assert [e.extra_keys for e in events] == [[["sql", "tenant:a"], ["sql"]], [None]]
    sub.close()


def test_seq_is_monotonic_from_zero(publisher: VllmKVPublisher) -> None:
    sub = subscribe(publisher.endpoints[0])
    frames = publish_until_received(publisher, sub, engine_batches() * 3)
    seqs = [int.from_bytes(f[1], "big") for f in frames]
    assert seqs == list(range(seqs[0], seqs[0] + 9))
    replayed = replay(publisher, 0)
    assert [s for s, _ in replayed] == list(range(seqs[-1] + 1))
    sub.close()


def replay(publisher: VllmKVPublisher, start: int) -> list[tuple[int, bytes]]:
    """vLLM's replay protocol from a REQ-like DEALER: the start seq in, (seq, payload) frames
    out, then the -1 end marker."""
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(publisher.endpoints[1] or "")
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        assert dealer.poll(30_000), "no replay answer"
        empty, topic, seq, payload = dealer.recv_multipart()
        number = int.from_bytes(seq, "big", signed=True)
        if number == -1:
            assert topic == b"" and payload == b""
            break
        assert empty == b"" and topic == b"kv@10.0.0.5:8000@tiny"
        out.append((number, payload))
    dealer.close()
    return out


def test_replay_after_a_gap_returns_exactly_the_missed_batches(publisher: VllmKVPublisher) -> None:
    sub = subscribe(publisher.endpoints[0])
    frames = publish_until_received(publisher, sub, engine_batches())
    last_seen = int.from_bytes(frames[0][1], "big")  # the subscriber "missed" the next two
    replayed = replay(publisher, last_seen + 1)
    assert [s for s, _ in replayed] == [last_seen + 1, last_seen + 2]
    assert [p for _, p in replayed] == [f[2] for f in frames[1:]]
    sub.close()


def test_replay_buffer_is_bounded() -> None:
    publisher = make_publisher(buffer_steps=2)
    try:
        sub = subscribe(publisher.endpoints[0])
        frames = publish_until_received(publisher, sub, engine_batches())
        last = int.from_bytes(frames[-1][1], "big")
        assert [s for s, _ in replay(publisher, 0)] == [last - 1, last]
        sub.close()
    finally:
        publisher.close()


def test_bind_for_wildcards_and_ipc_connect_otherwise() -> None:
    assert is_bind_endpoint("tcp://*:5557")
    assert is_bind_endpoint("tcp://[::]:5557")
    assert is_bind_endpoint("ipc:///tmp/kv")
    assert is_bind_endpoint("inproc://kv")
    assert not is_bind_endpoint("tcp://10.0.0.5:5557")
    assert not is_bind_endpoint("tcp://proxy.kv.svc:5557")


def test_connecting_publisher_reaches_a_bound_subscriber() -> None:
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    publisher = VllmKVPublisher(
        KVEventsConfig(enable_kv_cache_events=True, endpoint=f"tcp://127.0.0.1:{port}")
    )
    try:
        publish_until_received(publisher, sub, engine_batches()[:1])
    finally:
        publisher.close()
        sub.close(linger=0)


def test_config_takes_vllms_json_and_names_unknown_keys() -> None:
    text = (
        '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
        '"replay_endpoint": "tcp://*:5558", "topic": "t"}'
    )
    config = KVEventsConfig.from_json(text)
    assert config.enabled and config.replay_endpoint == "tcp://*:5558" and config.topic == "t"
    assert not KVEventsConfig.from_json('{"enable_kv_cache_events": false}').enabled
    assert KVEventsConfig.from_json('{"enable_kv_cache_events": true}').publisher == "zmq"
    with pytest.raises(ConfigError, match="enable_kv_cache_event"):
        KVEventsConfig.from_json('{"enable_kv_cache_event": true}')
    with pytest.raises(ConfigError, match="event_encoding"):
        KVEventsConfig.from_json('{"enable_kv_cache_events": true, "event_encoding": "json"}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        KVEventsConfig.from_json("{enable}")
