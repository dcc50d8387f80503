"""Taking in-flight requests from a replica that stopped answering (stopped, hung, partitioned).

Health checks take such a replica out of the candidate set within a second or two, but requests
already sent to it would wait for --request-timeout-s (minutes) and its streams would stall. Once
a replica has left the healthy set, a request that then hears nothing from it for
--stall-eject-s is taken from it: before its first byte the proxy retries it on another replica;
a stream already under way ends with an error event. A replica that is slow but passes its health
checks keeps its requests, and so does one that fails a check but goes on sending bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from router.replicas.replica import Replica

T = TypeVar("T")
POLL_S = 0.25


class ReplicaStalled(Exception):
    """The replica left the healthy set and has sent nothing for --stall-eject-s."""


def silent_too_long(replica: Replica, since: float, grace_s: float, now: float) -> bool:
    """True when `replica` is out of the healthy set and nothing arrived for `grace_s`, counted
    from `since` (the last byte, or the start of the wait) or from its ejection, the later."""
    if replica.healthy or replica.unhealthy_since is None:
        return False
    return now - max(since, replica.unhealthy_since) > grace_s


async def unless_stalled(replica: Replica, work: Awaitable[T], grace_s: float) -> T:
    """`work`'s result; ReplicaStalled (and `work` cancelled) when the replica stalls meanwhile."""
    task = asyncio.ensure_future(work)
    started = time.monotonic()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            if silent_too_long(replica, started, grace_s, time.monotonic()):
                raise ReplicaStalled(f"{replica.url} is unhealthy and silent for {grace_s:g} s")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class StreamWatch:
    """Watches one relayed stream: when its replica stalls, `on_stall` (closing the upstream
    connection) ends the relay, which then reports the stall to the client."""

    def __init__(self, replica: Replica, grace_s: float, on_stall: Callable[[], None]) -> None:
        self.last_chunk_at = time.monotonic()
        self.stalled = False
        self._task = asyncio.create_task(self._watch(replica, grace_s, on_stall))

    def chunk(self) -> None:
        self.last_chunk_at = time.monotonic()

    def stop(self) -> None:
        self._task.cancel()

    async def _watch(self, replica: Replica, grace_s: float, on_stall: Callable[[], None]) -> None:
        while not silent_too_long(replica, self.last_chunk_at, grace_s, time.monotonic()):
            await asyncio.sleep(POLL_S)
        self.stalled = True
        on_stall()
