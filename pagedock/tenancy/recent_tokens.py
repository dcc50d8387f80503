"""RecentTokens: the tokens each tenant was served lately, decaying with a half-life.

The router's flow control lets a tenant whose requests go at once hold more slots than its share
while it is served well under its share of the tokens everyone was served lately
(router/flow/flow_controller.py): slots held are a coarse measure of use, since a light tenant's
few requests arriving together hold as many slots as a heavy tenant's; tokens are what the fleet
spends. Each tenant's count decays by half every `half_life_s`, so the measure follows the last
tens of seconds, not the whole day (virtual token counters keep the long account).
"""

from __future__ import annotations

import math
from collections.abc import Collection


class RecentTokens:
    def __init__(self, half_life_s: float = 10.0) -> None:
        self.rate = math.log(2) / half_life_s
        self._counts: dict[str, tuple[float, float]] = {}
        """Each tenant's count, and when it was last brought up to date."""

    def add(self, tenant: str, tokens: float, now: float) -> None:
        if tokens > 0:
            self._counts[tenant] = (self.count(tenant, now) + tokens, now)

    def count(self, tenant: str, now: float) -> float:
        """`tenant`'s tokens as of `now`, each weighed by how recently it was served."""
        count, when = self._counts.get(tenant, (0.0, now))
        return count * math.exp(-self.rate * max(0.0, now - when))

    def well_below_share(self, tenant: str, tenants: Collection[str], now: float) -> bool:
        """Was `tenant` served fewer recent tokens than half an equal share of what `tenants`
        (and it) were? Half: tenants served about alike are never told apart by this measure's
        noise (two heavy tenants would otherwise take turns passing each other). Never when it
        is alone."""
        among = set(tenants) | {tenant}
        if len(among) < 2:
            return False
        total = sum(self.count(t, now) for t in among)
        return self.count(tenant, now) < total / len(among) / 2
