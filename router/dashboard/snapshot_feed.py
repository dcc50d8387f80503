"""SnapshotFeed: the dashboard's snapshot, built at most once per interval and shared by every
viewer, and the Server-Sent Events stream each viewer reads it from.

However many viewers and /dashboard/state readers there are, the router builds one snapshot per
`interval_s` at most (and none while nobody looks) and serializes it once; each viewer costs a
write of those bytes per interval. Viewers are capped (`max_viewers`): one more is refused, not
queued, so a forgotten tab or a script can't grow the router's work. A viewer's slot is its stream
object, held weakly: it is free again once the stream is gone, even one that was never started (a
client that left before its response began).
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

DEFAULT_INTERVAL_S = 0.5
DEFAULT_MAX_VIEWERS = 16


class TooManyViewers(Exception):
    """Every viewer slot is taken."""


class SnapshotFeed:
    def __init__(
        self,
        build: Callable[[], dict[str, Any]],
        interval_s: float = DEFAULT_INTERVAL_S,
        max_viewers: int = DEFAULT_MAX_VIEWERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self.interval_s = interval_s
        self.max_viewers = max_viewers
        self._clock = clock
        self._latest: bytes | None = None
        self._built_at = 0.0
        self.num_builds = 0
        self._streams: weakref.WeakSet[AsyncIterator[bytes]] = weakref.WeakSet()

    @property
    def viewers(self) -> int:
        return len(self._streams)

    def current(self) -> bytes:
        """The latest snapshot as JSON, built again once it is `interval_s` old."""
        now = self._clock()
        if self._latest is None or now - self._built_at >= self.interval_s:
            self._latest = json.dumps(self._build(), separators=(",", ":")).encode()
            self._built_at = now
            self.num_builds += 1
        return self._latest

    def join(self) -> AsyncIterator[bytes]:
        """A viewer's SSE stream (a slot is taken at once, or TooManyViewers)."""
        if self.viewers >= self.max_viewers:
            raise TooManyViewers(f"{self.max_viewers} viewers already watch this router")
        stream = self._events()
        self._streams.add(stream)
        return stream

    async def _events(self) -> AsyncIterator[bytes]:
        while True:
            yield b"event: snapshot\ndata: " + self.current() + b"\n\n"
            # NOTE: pacing, not synchronisation: a viewer is sent the shared snapshot once per
            # interval, whatever changed (a snapshot is small and bounded).
            await asyncio.sleep(self.interval_s)
