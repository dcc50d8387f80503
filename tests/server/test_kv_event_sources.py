"""GET /kv_event_sources and /get_server_info: where vLLM's consumers (vllm-router's kv_aware
policy) find an engine's ZMQ KV events; a wildcard bind address is reported as the address the
client reached the server on. tests/router/test_vllm_router.py drives the real consumer."""

from __future__ import annotations

from types import SimpleNamespace

from engine.server.kv_events.event_sources import kv_event_sources, reachable, server_info
from pagedock.kv.vllm_events import KVEventsConfig


def publisher(endpoints: tuple[str, str | None], **fields: object) -> SimpleNamespace:
    config = KVEventsConfig(enable_kv_cache_events=True, **fields)  # type: ignore[arg-type]
    return SimpleNamespace(config=config, endpoints=endpoints)


def test_a_wildcard_address_is_reported_as_the_one_the_client_reached() -> None:
    assert reachable("tcp://0.0.0.0:5557", "10.1.2.3") == "tcp://10.1.2.3:5557"
    assert reachable("tcp://[::]:5557", "fd00::7") == "tcp://[fd00::7]:5557"
    assert reachable("tcp://*:5557", "10.1.2.3") == "tcp://10.1.2.3:5557"
    assert reachable("tcp://10.9.9.9:5557", "10.1.2.3") == "tcp://10.9.9.9:5557"
    assert reachable("ipc:///tmp/kv", "10.1.2.3") == "ipc:///tmp/kv"


def test_the_sources_are_keyed_by_data_parallel_rank() -> None:
    found = kv_event_sources(
        publisher(("tcp://0.0.0.0:5557", "tcp://0.0.0.0:5558"), topic="kv"),  # type: ignore[arg-type]
        "10.1.2.3",
    )
    assert list(found) == ["0"]
    source = found["0"]
    assert (source["endpoint"], source["replay_endpoint"]) == (
        "tcp://10.1.2.3:5557",
        "tcp://10.1.2.3:5558",
    )
    assert (source["topic"], source["publisher"], source["encoding"]) == ("kv", "zmq", "msgpack")
    without_replay = kv_event_sources(publisher(("tcp://0.0.0.0:5557", None)), "h")  # type: ignore[arg-type]
    assert without_replay["0"]["replay_endpoint"] is None


def test_an_engine_without_zmq_events_has_no_sources() -> None:
    assert kv_event_sources(None, "10.1.2.3") == {}


def test_server_info_names_the_model_instance_and_block_size() -> None:
    assert server_info("tiny", "/models/tiny", "abc", 16) == {
        "model_id": "tiny",
        "model_path": "/models/tiny",
        "instance_id": "abc",
        "kv_block_size": 16,
        "effective_attention_block_size": 16,
    }
