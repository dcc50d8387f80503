"""A replica's KV snapshot is bounded and applied in slices: a huge one never stalls routing nor
fills the router's memory; over --max-snapshot-blocks, prefix affinity is off for that replica."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from router.kv.event_subscriber import (
    SLICE_BLOCKS,
    EventSubscriber,
    SnapshotTooLarge,
    bounded_lines,
)
from router.kv.kv_index import KVIndex
from router.metrics import RouterMetrics
from router.replicas.replica import Replica
from tests.router.factories import h, make_config

pytestmark = pytest.mark.asyncio
URL = "http://replica"


def snapshot_line(num_blocks: int) -> bytes:
    hashes = [h(i).hex() for i in range(num_blocks)]
    message = {
        "type": "snapshot",
        "instance_id": "i1",
        "seq": 0,
        "block_size": 16,
        "block_hashes": hashes,
    }
    return json.dumps(message).encode() + b"\n"


def subscriber_of(stream: bytes, **config: object) -> tuple[EventSubscriber, KVIndex, Replica]:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=stream))
    index, replica = KVIndex(), Replica(URL)
    client = httpx.AsyncClient(transport=transport)
    subscriber = EventSubscriber(
        replica, index, client, make_config(**config), RouterMetrics("prefix-aware")
    )
    return subscriber, index, replica


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_lines_are_split_across_chunk_boundaries() -> None:
    lines = [line async for line in bounded_lines(chunks(b"ab", b"c\nd", b"e\n\nf"), 10)]
    assert lines == [b"abc", b"de", b"", b"f"]


async def test_a_line_over_the_cap_raises_before_it_is_held_whole() -> None:
    with pytest.raises(SnapshotTooLarge):
        async for _ in bounded_lines(chunks(*[b"x" * 100] * 1000), 1000):
            pass


async def test_a_large_snapshot_is_applied_whole_while_the_event_loop_keeps_running() -> None:
    num_blocks = 4 * SLICE_BLOCKS + 5
    subscriber, index, replica = subscriber_of(snapshot_line(num_blocks))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await subscriber._consume()
    task.cancel()
    assert index.num_blocks(URL) == num_blocks and replica.kv_synced
    assert ticks >= 4  # routing got the loop between slices


async def test_a_snapshot_over_the_block_cap_is_not_applied() -> None:
    subscriber, index, replica = subscriber_of(snapshot_line(150), max_snapshot_blocks=100)
    with pytest.raises(SnapshotTooLarge):
        await subscriber._consume()
    assert index.num_blocks(URL) == 0 and not replica.kv_synced


async def test_the_refusal_is_shown_on_the_replica_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    subscriber, index, replica = subscriber_of(snapshot_line(150), max_snapshot_blocks=100)
    with caplog.at_level(logging.WARNING, logger="pagedock.router"):
        task = asyncio.create_task(subscriber.run())
        while replica.kv_error is None:
            await asyncio.sleep(0.01)
        task.cancel()
    assert "--max-snapshot-blocks 100" in replica.kv_error
    assert sum("prefix affinity is off" in r.message for r in caplog.records) == 1
    assert index.num_blocks(URL) == 0
