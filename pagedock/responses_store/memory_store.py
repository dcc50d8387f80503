"""MemoryResponsesStore: stored responses in this process, bounded by count (least recently used
first out), each expiring `ttl_s` seconds after it was stored (0: never)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from pagedock.errors import ConfigError
from pagedock.responses_store.store import ResponsesStore
from pagedock.responses_store.stored_response import StoredResponse


class MemoryResponsesStore(ResponsesStore):
    def __init__(
        self, max_entries: int, ttl_s: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_entries < 1:
            raise ConfigError(f"--responses-store-max-entries must be 1 or more, got {max_entries}")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        # (tenant, id) -> (record, when it expires; None: never), least recently used first.
        self._entries: OrderedDict[tuple[str, str], tuple[StoredResponse, float | None]] = (
            OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    async def put(self, record: StoredResponse) -> None:
        key = (record.tenant, record.id)
        expires = self._clock() + self.ttl_s if self.ttl_s > 0 else None
        # NOTE: a copy through JSON, as Redis keeps it: what a caller changes later is not stored.
        self._entries[key] = (StoredResponse.from_json(record.to_json()), expires)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        key = (tenant, response_id)
        entry = self._entries.get(key)
        if entry is None:
            return None
        record, expires = entry
        if expires is not None and self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return StoredResponse.from_json(record.to_json())

    async def delete(self, tenant: str, response_id: str) -> bool:
        found = await self.get(tenant, response_id) is not None
        self._entries.pop((tenant, response_id), None)
        return found

    async def close(self) -> None:
        self._entries.clear()
