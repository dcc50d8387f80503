"""An adapter's stored blocks on both KV-event wires: vLLM's msgpack (`lora_id`, `lora_name`, read
by vLLM's own structs and by the router's decoder, which chains them from the adapter's root) and
pagedock's NDJSON (`lora_name` on the stored event, absent for the base model)."""

from __future__ import annotations

import json

import msgspec
import pytest

from engine.core.kv_events import BlockStored, KVEventBatch
from engine.server.kv_events.ndjson_stream import encode_batch
from pagedock.kv.block_hash import hash_blocks
from pagedock.kv.ndjson_events import KVBatchMessage
from pagedock.kv.vllm_events import StoredEvent, decode_payload, to_uint64
from router.kv.kv_index import KVIndex
from router.kv.vllm_kv_view import VllmKVView, chain_root
from tests.server.test_vllm_kv_publisher import (
    ABatch,
    AStored,
    VBatch,
    VStored,
    make_publisher,
    publish_until_received,
    subscribe,
)

ROOT = b"\x02" * 32
TOKENS = list(range(200, 232))  # two blocks of 16
SQL = hash_blocks(TOKENS, 16, ROOT)  # the engine's hashes: opaque to a vLLM-format consumer


def adapter_batch() -> KVEventBatch:
    base = BlockStored(hash_blocks(TOKENS, 16, b"\x03" * 32), None, 16, TOKENS)
    return KVEventBatch(0, 1.0, [BlockStored(SQL, None, 16, TOKENS, 1, "sql"), base])


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_vllm_structs_and_the_routers_decoder_read_the_adapter(encoding: str) -> None:
    publisher = make_publisher(event_encoding=encoding)
    try:
        sub = subscribe(publisher.endpoints[0])
        [frames] = publish_until_received(publisher, sub, [adapter_batch()])
        sub.close()
    finally:
        publisher.close()
    payload = frames[2]
    ids = [to_uint64(h) for h in SQL]
    if encoding == "map":
        vllm_events = msgspec.msgpack.decode(payload, type=VBatch).events
        assert vllm_events[0] == VStored(ids, None, TOKENS, 16, 1, "GPU", "sql")
    else:
        vllm_events = msgspec.msgpack.decode(payload, type=ABatch).events
        assert vllm_events[0] == AStored(ids, None, TOKENS, 16, 1, "GPU", "sql")
    assert (vllm_events[1].lora_id, vllm_events[1].lora_name) == (None, None)
    sql, base = decode_payload(payload).events
    assert isinstance(sql, StoredEvent) and isinstance(base, StoredEvent)
    assert (sql.lora_id, sql.lora_name, base.lora_id, base.lora_name) == (1, "sql", None, None)


def test_the_router_chains_an_adapters_blocks_from_the_adapters_root() -> None:
    sql = StoredEvent([to_uint64(h) for h in SQL], None, TOKENS, 16, "sql", "GPU", 1)
    index = KVIndex()
    VllmKVView("replica-a", index).apply([sql])
    adapter_chain = hash_blocks(TOKENS, 16, chain_root("sql"))
    base_chain = hash_blocks(TOKENS, 16, chain_root(None))
    assert index.match(adapter_chain, ["replica-a"]) == {"replica-a": 2}
    assert index.match(base_chain, ["replica-a"]).get("replica-a", 0) == 0


def test_ndjson_names_the_adapter_on_its_stored_blocks_only() -> None:
    line = encode_batch(adapter_batch(), "engine-1")
    sql, base = json.loads(line)["events"]
    assert sql["lora_name"] == "sql" and sql["type"] == "stored"
    assert "lora_name" not in base  # base-model events read exactly as before adapters
    assert set(base) == {"type", "block_hashes", "parent_block_hash"}
    decoded = KVBatchMessage.model_validate_json(line)
    assert [e.lora_name for e in decoded.events] == ["sql", None]
