"""EventSubscriber.apply: the KV event stream's lines into the index, gaps and restarts resync;
a failed health check leaves a live stream (and its place under the engine's cap) be."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from router.kv.event_subscriber import EventSubscriber, ResyncNeeded
from router.kv.kv_index import KVIndex
from router.kv.subscriber_base import cancel_and_wait
from router.metrics import RouterMetrics
from router.replicas.replica import Replica
from tests.eventually import eventually
from tests.router.factories import h, make_config

URL = "http://replica"


def make_subscriber() -> tuple[EventSubscriber, KVIndex, Replica]:
    index, replica = KVIndex(), Replica(URL)
    subscriber = EventSubscriber(
        replica, index, httpx.AsyncClient(), make_config(), RouterMetrics("prefix-aware")
    )
    return subscriber, index, replica


def snapshot(
    instance: str = "i1", seq: int = 4, hashes: tuple[int, ...] = (1, 2)
) -> dict[str, object]:
    return {
        "type": "snapshot",
        "instance_id": instance,
        "seq": seq,
        "block_size": 16,
        "root_hash": "ab",
        "block_hashes": [h(i).hex() for i in hashes],
    }


def batch(seq: int, *events: dict[str, object], instance: str = "i1") -> dict[str, object]:
    return {"type": "batch", "instance_id": instance, "seq": seq, "events": list(events)}


def stored(*hashes: int) -> dict[str, object]:
    return {
        "type": "stored",
        "block_hashes": [h(i).hex() for i in hashes],
        "parent_block_hash": None,
    }


def removed(*hashes: int) -> dict[str, object]:
    return {"type": "removed", "block_hashes": [h(i).hex() for i in hashes]}


def test_a_snapshot_sets_the_replicas_blocks_root_and_block_size() -> None:
    subscriber, index, replica = make_subscriber()
    subscriber.apply(snapshot())
    assert index.match([h(1), h(2)], [URL]) == {URL: 2}
    assert (replica.root_hash, replica.block_size, replica.kv_synced) == (
        bytes.fromhex("ab"),
        16,
        True,
    )


def test_batches_apply_in_sequence() -> None:
    subscriber, index, _ = make_subscriber()
    subscriber.apply(snapshot(seq=-1, hashes=()))
    subscriber.apply(batch(0, stored(1, 2)))
    subscriber.apply(batch(1, removed(2), stored(3)))
    assert index.match([h(1), h(2)], [URL]) == {URL: 1}
    assert index.num_blocks(URL) == 2


def test_batches_already_in_the_snapshot_are_skipped() -> None:
    subscriber, index, _ = make_subscriber()
    subscriber.apply(snapshot(seq=4, hashes=(1,)))
    subscriber.apply(batch(4, removed(1)))
    assert index.num_blocks(URL) == 1


def test_a_gap_in_sequence_numbers_forces_a_resync() -> None:
    subscriber, _, _ = make_subscriber()
    subscriber.apply(snapshot(seq=4))
    with pytest.raises(ResyncNeeded):
        subscriber.apply(batch(6, stored(9)))


def test_a_batch_from_another_instance_forces_a_resync() -> None:
    subscriber, _, _ = make_subscriber()
    subscriber.apply(snapshot(instance="i1"))
    with pytest.raises(ResyncNeeded):
        subscriber.apply(batch(5, stored(9), instance="i2"))


def test_a_restarted_replicas_snapshot_replaces_the_old_view() -> None:
    subscriber, index, replica = make_subscriber()
    subscriber.apply(snapshot(instance="i1", hashes=(1, 2)))
    subscriber.apply(snapshot(instance="i2", seq=-1, hashes=()))
    assert (replica.instance_id, index.num_blocks(URL)) == ("i2", 0)


def test_cleared_drops_every_block() -> None:
    subscriber, index, _ = make_subscriber()
    subscriber.apply(snapshot(seq=0))
    subscriber.apply(batch(1, {"type": "cleared", "block_hashes": []}))
    assert index.num_blocks(URL) == 0


def test_stored_runs_are_grouped_by_the_chain_their_parent_names() -> None:
    subscriber, index, _ = make_subscriber()
    subscriber.apply(snapshot(seq=0, hashes=(7,)))
    continued = {**stored(3), "parent_block_hash": h(2).hex()}
    subscriber.apply(batch(1, stored(1, 2), continued))
    counts = index.groups.counts(URL, 10)
    assert counts.groups == [(h(1), 3)]
    assert counts.untraced_blocks == 1  # the snapshot's: its parents are not sent


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_a_failed_check_keeps_a_live_stream_and_its_view() -> None:
    """A slow /health (an engine busy with a flood of connections) must not end the stream: its
    place under --max-kv-event-subscribers would go to whoever asks next."""
    connections: list[httpx.Request] = []
    hold = asyncio.Event()

    async def lines() -> AsyncIterator[bytes]:
        yield json.dumps(snapshot(hashes=(1, 2))).encode() + b"\n"
        await hold.wait()
        yield json.dumps(batch(5, stored(3))).encode() + b"\n"
        await asyncio.Event().wait()

    def serve(request: httpx.Request) -> httpx.Response:
        connections.append(request)
        return httpx.Response(200, content=lines())

    index, replica = KVIndex(), Replica(URL)
    async with httpx.AsyncClient(transport=httpx.MockTransport(serve)) as client:
        subscriber = EventSubscriber(
            replica, index, client, make_config(), RouterMetrics("prefix-aware")
        )
        task = asyncio.create_task(subscriber.run())
        try:
            await eventually(lambda: replica.kv_synced, what="the snapshot applied")
            subscriber.replica_failed()
            hold.set()
            await eventually(lambda: index.num_blocks(URL) == 3, what="the next batch applied")
            assert replica.kv_synced and len(connections) == 1
        finally:
            await cancel_and_wait(task)
