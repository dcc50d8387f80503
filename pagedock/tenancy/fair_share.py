"""VirtualTokenCounter: fair sharing between tenants by the tokens each has been served.

Virtual token counters (Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024):
each tenant has a counter of the tokens served to it (prompt and completion alike); whenever
there is room for one more request, the backlogged tenant with the lowest counter goes next. A
tenant that was idle does not bank credit: when it becomes backlogged again its counter is lifted
to the lowest counter among the tenants already backlogged, so it shares from then on rather than
taking the fleet until it catches up.

Within a tenant, requests keep their arrival order; between priority bands the caller decides
(the counters are per band's candidates, not per band).
"""

from __future__ import annotations

from collections.abc import Collection


class VirtualTokenCounter:
    def __init__(self) -> None:
        self.counters: dict[str, float] = {}

    def charge(self, tenant: str, tokens: float) -> None:
        """`tokens` served to `tenant` (prompt tokens once admitted, completion tokens as made)."""
        if tokens > 0:
            self.counters[tenant] = self.counters.get(tenant, 0.0) + tokens

    def backlogged(self, tenant: str, others: Collection[str]) -> None:
        """`tenant` has work waiting again, beside the already backlogged `others`: lift its
        counter to theirs if it fell behind while idle."""
        floor = min((self.counters.get(o, 0.0) for o in others if o != tenant), default=None)
        if floor is not None and self.counters.get(tenant, 0.0) < floor:
            self.counters[tenant] = floor

    def pick(self, candidates: Collection[str]) -> str:
        """The candidate served least (ties: the first in `candidates`' order)."""
        return min(candidates, key=lambda t: self.counters.get(t, 0.0))

    def counter(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)
