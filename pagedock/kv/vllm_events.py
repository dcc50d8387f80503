"""vLLM's KV-event wire format (vllm/distributed/kv_events.py, vLLM 0.32), both ways, torch-free.

    ZMQ PUB frames:    [topic, seq (8 bytes, big-endian, from 0), payload]
    payload (msgpack): [ts, [event, ...], dp_rank]        (dp_rank omitted when None)
    event, map form:   {"type": "BlockStored", "block_hashes": [u64], "parent_block_hash": u64|nil,
                        "token_ids": [int], "block_size": int, "lora_id": int|nil, "medium": "GPU",
                        "lora_name": str|nil, "extra_keys": [[str]|nil]  (salted chains only)}
                       {"type": "BlockRemoved", "block_hashes": [u64], "medium": "GPU"}
                       {"type": "AllBlocksCleared"}
    event, array form: ["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium,
                        lora_name, extra_keys?] (the positional form older vLLM sent; decoders
                        take both)
    replay (ROUTER):   request [8-byte start seq]; answer one [topic, seq, payload] per buffered
                       batch with seq >= start, then [b"", seq -1, b""]

vLLM's own struct has no defaults for `lora_id`, `medium` and `lora_name`, so every field is sent.
Blocks computed with a LoRA adapter carry its id (the adapter's load, 1-based, vLLM's lora_int_id)
and its name; a consumer that re-hashes `token_ids` starts such a chain from a root of the
adapter's own, so an adapter's blocks never match the base model's or another adapter's.
A request's `cache_salt` is in vLLM's `extra_keys` (one entry per block: the adapter's name on
each, then the salt on a chain's first block), the only place a consumer can read it: the
engine sends the field for salted chains (older consumers ignore a trailing field), and a
consumer salts the chain's root with it (pagedock/kv/block_hash.py) as the engine did.
The engine publishes its block hashes as uint64 (the low 64 bits of pagedock's sha256); a
consumer treats them as opaque ids and re-hashes `token_ids` itself. The decoder here (the
router's) is lenient the way llm-d's and Dynamo's are: both event forms, bytes or int hashes,
unknown trailing fields ignored, a batch of 2 or 3 elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pagedock.errors import ConfigError
from pagedock.options import json_object_option

END_SEQ = -1
MEDIUM_GPU = "GPU"
EVENT_ENCODINGS = ("map", "array")
PUBLISHERS = ("null", "zmq")

OpaqueHash = int | bytes
"""A publisher's block hash: uint64 from pagedock (and vLLM by default), bytes from some vLLMs."""


@dataclass
class KVEventsConfig:
    """--kv-events-config / PAGEDOCK_KV_EVENTS_CONFIG: vLLM's JSON fields, plus `event_encoding`."""

    enable_kv_cache_events: bool = False
    """Publish vLLM-format KV events (raw prompt token ids: keep the ports private)."""
    publisher: str | None = None
    """zmq or null; unset = zmq when enabled."""
    endpoint: str = "tcp://*:5557"
    """PUB address; bound when it has a wildcard (* or ::) or is ipc:// / inproc://, else
    connected (to a proxy that subscribers bind)."""
    replay_endpoint: str | None = None
    """ROUTER address for replays (always bound); None = no replay."""
    buffer_steps: int = 10_000
    """Batches kept for replay."""
    hwm: int = 100_000
    """ZMQ high-water mark of the PUB socket (messages queued per subscriber before dropping)."""
    max_queue_size: int = 100_000
    """Batches waiting for the publisher thread; beyond it the oldest is dropped (and counted)."""
    topic: str = ""
    """First frame of every message; subscribers filter on its prefix."""
    event_encoding: str = "map"
    """map (vLLM 0.32's tagged maps) or array (the older positional form)."""

    def __post_init__(self) -> None:
        if self.publisher is None:
            self.publisher = "zmq" if self.enable_kv_cache_events else "null"
        _check(
            self.publisher in PUBLISHERS,
            f"kv-events-config: publisher must be one of {PUBLISHERS}, got {self.publisher!r}",
        )
        _check(
            self.event_encoding in EVENT_ENCODINGS,
            f"kv-events-config: event_encoding must be one of {EVENT_ENCODINGS}, "
            f"got {self.event_encoding!r}",
        )
        for name in ("buffer_steps", "hwm", "max_queue_size"):
            _check(getattr(self, name) >= 1, f"kv-events-config: {name} must be at least 1")
        _check(
            "://" in self.endpoint,
            "kv-events-config: endpoint must be a ZMQ address such as tcp://*:5557, "
            f"got {self.endpoint!r}",
        )

    @property
    def enabled(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"

    @classmethod
    def from_json(cls, text: str) -> KVEventsConfig:
        """Parse the flag's JSON; unknown keys are an error naming them (a typo must not turn
        the events silently off)."""
        values = json_object_option(text, "--kv-events-config", cls)
        try:
            return cls(**values)
        except TypeError as e:
            raise ConfigError(f"kv-events-config: {e}") from e


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule: bind wildcard addresses and ipc/inproc ones, connect to the rest."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def to_uint64(block_hash: bytes) -> int:
    """pagedock's sha256 block hash as the uint64 vLLM consumers expect: its low 64 bits, as vLLM
    converts its own sha256 hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)."""
    return int.from_bytes(block_hash[-8:], "big")


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


def seq_from_bytes(frame: bytes) -> int:
    if len(frame) != 8:
        raise ValueError(f"a sequence frame has 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)


# ---- encoding (the engine's publisher) ------------------------------------------------------


def block_stored(
    block_hashes: list[int],
    parent_block_hash: int | None,
    token_ids: list[int],
    block_size: int,
    encoding: str = "map",
    *,
    lora_id: int | None = None,
    lora_name: str | None = None,
    extra_keys: list[list[str] | None] | None = None,
) -> dict[str, Any] | list[Any]:
    """Blocks computed with a LoRA adapter name it (`lora_id`, `lora_name`); None: the base.
    `extra_keys` (block_extra_keys) is sent when not None."""
    values: dict[str, Any] = {
        "block_hashes": block_hashes,
        "parent_block_hash": parent_block_hash,
        "token_ids": token_ids,
        "block_size": block_size,
        "lora_id": lora_id,
        "medium": MEDIUM_GPU,
        "lora_name": lora_name,
    }
    if extra_keys is not None:
        values["extra_keys"] = extra_keys
    return _tagged("BlockStored", values, encoding)


def block_extra_keys(
    num_blocks: int, first_of_chain: bool, lora_name: str | None, cache_salt: str | None
) -> list[list[str] | None] | None:
    """vLLM's `extra_keys` of a stored run: each block's adapter name, and the salt on the
    chain's first block; None (the field left out) for an unsalted chain."""
    if cache_salt is None:
        return None
    adapter = [lora_name] if lora_name else []
    keys: list[list[str] | None] = [adapter or None for _ in range(num_blocks)]
    if first_of_chain and num_blocks:
        keys[0] = [*adapter, cache_salt]
    return keys


def block_removed(block_hashes: list[int], encoding: str = "map") -> dict[str, Any] | list[Any]:
    return _tagged("BlockRemoved", {"block_hashes": block_hashes, "medium": MEDIUM_GPU}, encoding)


def all_blocks_cleared(encoding: str = "map") -> dict[str, Any] | list[Any]:
    return _tagged("AllBlocksCleared", {}, encoding)


def _tagged(tag: str, values: dict[str, Any], encoding: str) -> dict[str, Any] | list[Any]:
    if encoding == "array":
        return [tag, *values.values()]
    return {"type": tag, **values}


def encode_payload(ts: float, events: list[Any], dp_rank: int | None = None) -> bytes:
    import msgpack

    batch: list[Any] = [ts, events] if dp_rank is None else [ts, events, dp_rank]
    return msgpack.packb(batch, use_bin_type=True)


# ---- decoding (the router's subscriber) -----------------------------------------------------


@dataclass(frozen=True)
class StoredEvent:
    block_hashes: list[OpaqueHash]
    parent_block_hash: OpaqueHash | None
    token_ids: list[int]
    block_size: int
    lora_name: str | None = None
    medium: str | None = None
    lora_id: int | None = None
    extra_keys: list[Any] | None = None
    """vLLM's per-block extra hash keys (None: none); `chain_salt` reads the salt out of them."""


@dataclass(frozen=True)
class RemovedEvent:
    block_hashes: list[OpaqueHash]
    medium: str | None = None


@dataclass(frozen=True)
class ClearedEvent:
    pass


WireEvent = StoredEvent | RemovedEvent | ClearedEvent
EventKind = Literal["BlockStored", "BlockRemoved", "AllBlocksCleared"]
_POSITIONS = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
        "extra_keys",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


@dataclass(frozen=True)
class WireBatch:
    ts: float
    events: list[WireEvent]
    dp_rank: int | None


def decode_payload(payload: bytes) -> WireBatch:
    """One batch, either event form; ValueError names what is malformed. Events of kinds this
    decoder does not know are skipped (newer publishers may add some)."""
    import msgpack

    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (msgpack.UnpackException, ValueError) as e:
        raise ValueError(f"not a msgpack KV event batch: {e}") from e
    if not isinstance(batch, list) or len(batch) not in (2, 3):
        raise ValueError("a KV event batch is an array [ts, events] or [ts, events, dp_rank]")
    ts, raw_events = batch[0], batch[1]
    dp_rank = batch[2] if len(batch) == 3 else None
    if not isinstance(raw_events, list):
        raise ValueError("a KV event batch's events must be an array")
    events = [e for e in (decode_event(raw) for raw in raw_events) if e is not None]
    return WireBatch(float(ts), events, dp_rank)


def decode_event(raw: Any) -> WireEvent | None:
    fields_ = _event_fields(raw)
    if fields_ is None:
        return None
    kind, values = fields_
    if kind == "BlockStored":
        return StoredEvent(
            block_hashes=list(values["block_hashes"]),
            parent_block_hash=values.get("parent_block_hash"),
            token_ids=[int(t) for t in values["token_ids"]],
            block_size=int(values["block_size"]),
            lora_name=values.get("lora_name"),
            medium=values.get("medium"),
            lora_id=values.get("lora_id"),
            extra_keys=values.get("extra_keys"),
        )
    if kind == "BlockRemoved":
        return RemovedEvent(list(values["block_hashes"]), values.get("medium"))
    return ClearedEvent()


class UnhashableKeys(ValueError):
    """A chain's first block has extra keys the router cannot re-hash (multimodal ones)."""


def chain_salt(event: StoredEvent) -> str | None:
    """The cache_salt a chain's first stored block names in its extra keys (after its adapter's
    name), or None; UnhashableKeys for keys other than these."""
    extra = event.extra_keys
    first = extra[0] if isinstance(extra, list) and extra else None
    keys = list(first) if isinstance(first, (list, tuple)) else []
    if keys and event.lora_name is not None and keys[0] == event.lora_name:
        keys = keys[1:]
    if not keys:
        return None
    if len(keys) == 1 and isinstance(keys[0], str):
        return keys[0]
    raise UnhashableKeys(f"extra keys {keys!r} name more than a cache_salt")


def _event_fields(raw: Any) -> tuple[str, dict[str, Any]] | None:
    """(tag, fields by name) of a map-form or array-form event; None for an unknown tag."""
    if isinstance(raw, dict):
        kind = raw.get("type")
        values = raw
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        kind = raw[0]
        values = dict(zip(_POSITIONS.get(kind, ()), raw[1:], strict=False))
    else:
        raise ValueError(f"a KV event is a tagged map or array, got {type(raw).__name__}")
    if kind not in _POSITIONS:
        return None
    missing = [n for n in _POSITIONS[kind][:4] if n not in values and n != "lora_id"]
    if kind == "BlockStored" and missing:
        raise ValueError(f"BlockStored without {missing}")
    if kind == "BlockRemoved" and "block_hashes" not in values:
        raise ValueError("BlockRemoved without block_hashes")
    return kind, values


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
