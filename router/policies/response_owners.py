"""ResponseOwners: which replica produced each Responses API response, so a follow-up
(`previous_response_id`) goes where its conversation's KV blocks are cached.

A bounded map (tenant, response id) -> replica URL: at most `max_entries` (the least recently used
goes first), each kept `ttl_s` seconds (0: until evicted; an expired one goes when next looked
up, or evicted). It is a routing hint only, never an
authorization: the engine decides who may read or continue a stored response (by its tenant), and
a replica the map names is used only while it is healthy and serves the request's model. Keyed by
tenant too, so a client that holds another tenant's id learns nothing of where it lives.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class ResponseOwners:
    def __init__(
        self, max_entries: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._owners: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        """(tenant, response id) -> (replica URL, when it expires: inf for never)."""

    def __len__(self) -> int:
        return len(self._owners)

    def learn(self, tenant: str, response_id: str, replica: str) -> None:
        """`replica` produced `response_id` for `tenant`."""
        if self.max_entries <= 0:
            return
        key = (tenant, response_id)
        expires = self._clock() + self.ttl_s if self.ttl_s > 0 else float("inf")
        self._owners[key] = (replica, expires)
        self._owners.move_to_end(key)
        while len(self._owners) > self.max_entries:
            self._owners.popitem(last=False)

    def owner(self, tenant: str, response_id: str) -> str | None:
        """The replica that produced `response_id` for `tenant`, if known and not expired."""
        key = (tenant, response_id)
        found = self._owners.get(key)
        if found is None:
            return None
        replica, expires = found
        if self._clock() >= expires:
            del self._owners[key]
            return None
        self._owners.move_to_end(key)
        return replica

    def forget(self, tenant: str, response_id: str) -> None:
        """`response_id` was deleted."""
        self._owners.pop((tenant, response_id), None)
