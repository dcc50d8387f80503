"""KVEventSubscriber's loop, shared by the pagedock and vLLM subscribers: backoff doubling to its
cap and back to the start after a synced attempt, the view dropped after every attempt,
resubscribe() ending one attempt, and cancel ending the loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from router.kv.kv_index import KVIndex
from router.kv.subscriber_base import KVEventSubscriber, cancel_and_wait
from router.metrics import RouterMetrics
from router.replicas.replica import Replica
from tests.router.factories import make_config

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]
URL = "http://replica"


class ScriptedSubscriber(KVEventSubscriber):
    """Every attempt fails at once (the one numbered `synced_on` after syncing); the waits the
    loop asks for are recorded, not waited."""

    def __init__(self, attempts: int, synced_on: int | None = None) -> None:
        config = make_config(event_backoff_min_s=0.5, event_backoff_max_s=3.0)
        super().__init__(Replica(URL), KVIndex(), config, RouterMetrics("x"), (0.5, 3.0))
        self.attempts, self.synced_on = attempts, synced_on
        self.delays: list[float] = []
        self.drops = 0
        self.finished = asyncio.Event()

    async def _consume(self) -> None:
        if len(self.delays) + 1 == self.synced_on:
            self.replica.kv_synced = True
        raise ValueError("a malformed message")

    async def _drop_view(self) -> None:
        self.drops += 1

    def _retry_delay_s(self, backoff_s: float) -> float:
        self.delays.append(backoff_s)
        if len(self.delays) == self.attempts:
            self.finished.set()
        return 0.0


class HangingSubscriber(ScriptedSubscriber):
    """Each attempt waits until it is cancelled."""

    def __init__(self) -> None:
        super().__init__(attempts=1)
        self.started = asyncio.Event()

    async def _consume(self) -> None:
        self.started.set()
        await asyncio.Event().wait()


async def run_until_finished(subscriber: ScriptedSubscriber) -> None:
    """Run the loop for its scripted attempts, then cancel it: the cancel ends it."""
    task = asyncio.create_task(subscriber.run())
    await subscriber.finished.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_backoff_doubles_to_its_cap(caplog: pytest.LogCaptureFixture) -> None:
    subscriber = ScriptedSubscriber(attempts=5)
    with caplog.at_level(logging.ERROR, logger="pagedock.router"):
        await run_until_finished(subscriber)
    assert subscriber.delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert subscriber.drops == 5 and not subscriber.replica.kv_synced
    assert f"KV events of {URL}: unexpected error" in caplog.messages


async def test_an_attempt_that_had_synced_starts_the_backoff_again() -> None:
    subscriber = ScriptedSubscriber(attempts=6, synced_on=5)
    await run_until_finished(subscriber)
    assert subscriber.delays == [0.5, 1.0, 2.0, 3.0, 0.5, 1.0]


@pytest.mark.parametrize("end", ["resubscribe", "replica_failed"])
async def test_resubscribe_ends_the_attempt_not_the_loop(end: str) -> None:
    """replica_failed() too, for a stream with no liveness of its own (vLLM's ZMQ)."""
    subscriber = HangingSubscriber()
    task = asyncio.create_task(subscriber.run())
    await subscriber.started.wait()
    getattr(subscriber, end)()
    await subscriber.finished.wait()
    assert not task.done() and subscriber.drops == 1 and subscriber.delays == [0.5]
    await cancel_and_wait(task)
    assert task.cancelled()
