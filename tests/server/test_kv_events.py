"""GET /v1/kv/events: a snapshot plus the deltas after it reproduce the engine's cached-hash set
exactly; a consumer that falls behind is resynchronised from a fresh snapshot."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator

import httpx

from engine.server.kv_events.ndjson_stream import KVEventConsumer
from tests.server.conftest import TINY_NUM_KV_BLOCKS
from tests.server.server_process import ServerProcess


class CacheMirror:
    """What a router keeps: the engine's cached hashes, rebuilt from the stream's lines."""

    def __init__(self) -> None:
        self.hashes: set[str] = set()
        self.seq = -1
        self.instance_id: str | None = None

    def apply(self, message: dict[str, object]) -> None:
        kind = message["type"]
        if kind == "heartbeat":
            return
        self.instance_id = str(message["instance_id"])
        seq = int(message["seq"])  # type: ignore[call-overload]
        if kind == "snapshot":
            self.hashes = set(message["block_hashes"])  # type: ignore[call-overload]
        else:
            assert seq == self.seq + 1, f"gap: batch {seq} after {self.seq}"
            for event in message["events"]:  # type: ignore[attr-defined]
                self._apply_event(event)
        self.seq = seq

    def _apply_event(self, event: dict[str, object]) -> None:
        hashes = set(event["block_hashes"])  # type: ignore[call-overload]
        if event["type"] == "stored":
            self.hashes |= hashes
        elif event["type"] == "removed":
            assert hashes <= self.hashes, "removed a hash that was never stored"
            self.hashes -= hashes
        else:
            self.hashes.clear()


def snapshot(server: ServerProcess) -> dict[str, object]:
    with httpx.stream("GET", f"{server.url}/v1/kv/events", timeout=10) as r:
        message: dict[str, object] = json.loads(next(r.iter_lines()))
        return message


def random_workload(seed: int = 0) -> list[list[int]]:
    """Prompts sharing a few prefixes, more blocks in total than the pool holds (evictions)."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, 500) for _ in range(rng.randint(16, 80))] for _ in range(4)]
    return [
        rng.choice(prefixes) + [rng.randrange(3, 500) for _ in range(rng.randint(10, 200))]
        for _ in range(60)
    ]


async def run_workload(url: str, prompts: list[list[int]]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        semaphore = asyncio.Semaphore(8)

        async def one(prompt: list[int]) -> None:
            async with semaphore:
                body = {"prompt": prompt, "max_tokens": 20, "ignore_eos": True}
                (await client.post("/v1/completions", json=body)).raise_for_status()

        await asyncio.gather(*(one(p) for p in prompts))


def test_snapshot_plus_deltas_reproduce_the_cached_hash_set(tiny_server: ServerProcess) -> None:
    prompts = random_workload()
    assert sum(len(p) + 20 for p in prompts) // 16 > TINY_NUM_KV_BLOCKS  # it must evict
    mirror = CacheMirror()
    with httpx.stream("GET", f"{tiny_server.url}/v1/kv/events", timeout=30) as stream:
        lines: Iterator[str] = stream.iter_lines()
        mirror.apply(json.loads(next(lines)))
        asyncio.run(run_workload(tiny_server.url, prompts))
        truth = snapshot(tiny_server)  # taken on the engine thread, now idle
        while mirror.seq < int(truth["seq"]):  # type: ignore[call-overload]
            mirror.apply(json.loads(next(lines)))
    assert mirror.seq == truth["seq"]
    assert mirror.instance_id == truth["instance_id"]
    assert mirror.hashes == set(truth["block_hashes"])  # type: ignore[call-overload]
    assert len(mirror.hashes) <= TINY_NUM_KV_BLOCKS


def test_snapshot_hashes_are_hex_sha256(tiny_server: ServerProcess) -> None:
    message = snapshot(tiny_server)
    assert message["type"] == "snapshot" and message["block_size"] == 16
    for h in message["block_hashes"]:  # type: ignore[attr-defined]
        assert len(h) == 64 and int(h, 16) >= 0


# ---- the per-consumer buffer, without a server -------------------------------------------


def test_a_consumer_that_falls_behind_drops_its_buffer_and_must_resync() -> None:
    async def scenario() -> tuple[bool, list[bytes]]:
        consumer = KVEventConsumer(max_batches=2)
        for seq in range(3):  # one more than the buffer holds
            consumer.offer(seq, f"batch {seq}\n".encode())
        lines = [line async for line in consumer.lines(heartbeat_s=1.0, instance_id="x")]
        return consumer.overflowed, lines

    overflowed, lines = asyncio.run(scenario())
    assert overflowed and lines == []  # nothing stale is sent; the stream takes a new snapshot


def test_after_a_snapshot_only_newer_batches_are_sent() -> None:
    async def scenario() -> list[bytes]:
        consumer = KVEventConsumer(max_batches=8)
        for seq in range(4):
            consumer.offer(seq, f"batch {seq}\n".encode())
        consumer.restart_after(snapshot_seq=1)  # batches 0 and 1 are in the snapshot
        out = []
        async for line in consumer.lines(heartbeat_s=1.0, instance_id="x"):
            out.append(line)
            if len(out) == 2:
                consumer.close()
        return out

    assert asyncio.run(scenario()) == [b"batch 2\n", b"batch 3\n"]
