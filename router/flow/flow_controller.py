"""FlowController: when the fleet is busy, requests wait here, by priority band and fairly
between tenants, instead of piling into the engines' queues.

    a slot free, nobody waiting   the request goes at once
    its tenant below its share    it goes at once too (--fairness vtc): a tenant holding fewer
                                  slots than its fair share (the slots over the tenants with
                                  requests under way or waiting in its band or a more urgent
                                  one), or served well under its share of their recent tokens
                                  (pagedock/tenancy/recent_tokens.py), never waits for a
                                  heavier one, nor for a less urgent band;
                                  the slots may be exceeded by up to such tenants' shares
                                  (never past twice the slots), taken back as the heavy
                                  tenants' requests end
    all slots taken               it waits in its band (its vLLM priority: lower goes first),
                                  behind its own tenant's earlier requests
    its tenant falls below its    its oldest waiting request goes at once (--fairness vtc):
    share (one of its requests    a tenant that waits because it held its share waits for its
    ended)                        own requests, not for a heavier tenant's
    a slot frees                  the most urgent band with waiters goes; within it the tenant
                                  served the fewest tokens (virtual token counters; --fairness
                                  fcfs: the oldest); a band not served for
                                  --flow-starvation-s (since it last was, or since it began
                                  to wait) goes first, once: each band gets a slot at least
                                  that often, and under a sustained flood of every band the
                                  order stays by priority, not by age
    a band full                   the tenant with the most waiting gives up its newest (429
                                  fleet_saturated), unless the newcomer's tenant is that one:
                                  a heavy tenant's extra load is shed, a light one still gets in
    waited --flow-queue-ttl-s     429 queue_timeout

Slots: --max-inflight-per-replica times the ready replicas, counted by the router for every
request it admitted and has not seen end. With 0, nothing waits here and the engines' own fair
queues (engine/core) order the requests; the counters still record each tenant's tokens.

All on the router's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pagedock.tenancy.fair_share import VirtualTokenCounter
from pagedock.tenancy.recent_tokens import RecentTokens
from router.flow_config import FlowConfig


class FlowRefused(Exception):
    """A request the flow queues would not take or keep: its 429 code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class FlowRequest:
    tenant: str
    priority: int
    cost_tokens: int
    arrived: float
    granted: asyncio.Future[FlowTicket] | None = None
    """Set while it waits: resolved with its ticket, or failed when it is shed."""


@dataclass(eq=False)
class FlowTicket:
    """An admitted request's slot: charge its tokens as they are served, release it at its end
    (once; later calls do nothing)."""

    controller: FlowController
    tenant: str
    priority: int
    waited_s: float
    holds_slot: bool
    released: bool = False

    def charge(self, tokens: int) -> None:
        self.controller.vtc.charge(self.tenant, tokens)
        self.controller.recent.add(self.tenant, tokens, time.monotonic())

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.holds_slot:
            self.controller.forget(self.tenant, self.priority)
            self.controller.pump()


@dataclass
class Band:
    priority: int
    flows: dict[str, deque[FlowRequest]] = field(default_factory=dict)
    """Each backlogged tenant's waiting requests, oldest first (in the order tenants became
    backlogged)."""
    size: int = 0
    last_served: float = 0.0
    """When a request of this band last got a slot, or when the band began to wait: the
    starvation guard's clock."""


class FlowController:
    def __init__(self, config: FlowConfig, num_replicas: Callable[[], int]) -> None:
        self.config = config
        self.num_replicas = num_replicas
        """Ready replicas now (each has --max-inflight-per-replica slots)."""
        self.vtc = VirtualTokenCounter()
        self.recent = RecentTokens()
        """Tokens served lately per tenant: a tenant served well under its share goes at once."""
        self.bands: dict[int, Band] = {}
        self.held: Counter[tuple[str, int]] = Counter()
        """Slots held per (tenant, priority taken at): only pairs holding some."""

    @property
    def limited(self) -> bool:
        return self.config.max_inflight_per_replica > 0

    @property
    def in_flight(self) -> int:
        """Admitted requests holding a slot (only while slots are limited)."""
        return self.held.total()

    def waiting(self) -> int:
        return sum(b.size for b in self.bands.values())

    def oldest_wait_s(self, now: float | None = None) -> float:
        heads = [q[0].arrived for b in self.bands.values() for q in b.flows.values()]
        return 0.0 if not heads else (now or time.monotonic()) - min(heads)

    async def admit(self, tenant: str, priority: int, cost_tokens: int) -> FlowTicket:
        """The request's ticket, at once or once a slot is its; FlowRefused when its band is full,
        it is shed for a lighter tenant, or it waited --flow-queue-ttl-s."""
        request = FlowRequest(tenant, priority, cost_tokens, time.monotonic())
        if not self.limited or (not self.waiting() and self._has_slot()):
            return self._grant(request)
        if self._below_share(request.tenant, request.priority):
            return self._grant(request)
        self._enqueue(request)
        granted = request.granted
        assert granted is not None
        try:
            async with asyncio.timeout(self.config.flow_queue_ttl_s):
                return await asyncio.shield(granted)
        except TimeoutError:
            if granted.done() and not granted.cancelled() and granted.exception() is None:
                return granted.result()  # granted as the time ran out: it goes
            self._leave(request)
            raise FlowRefused(
                "queue_timeout",
                f"the fleet stayed busy: the request waited {self.config.flow_queue_ttl_s:g} s "
                "(--flow-queue-ttl-s) for a slot",
            ) from None
        except BaseException:  # its client left (cancelled), or it was shed
            self._leave(request)
            raise

    def pump(self) -> None:
        """Grant waiting requests while slots are free (a request ended, a replica came), then
        those of tenants now below their share (one of theirs ended), as on arrival."""
        while self.waiting() and self._has_slot():
            self._grant_waiting(self._next(time.monotonic()))
        if self.config.fairness != "vtc":
            return
        for band in list(self.bands.values()):
            for tenant in list(band.flows):
                while tenant in band.flows and self._under_share(tenant, band.priority):
                    self._grant_waiting(band.flows[tenant][0])

    def _grant_waiting(self, request: FlowRequest) -> None:
        self._remove(request)
        assert request.granted is not None
        request.granted.set_result(self._grant(request))

    def _has_slot(self) -> bool:
        return self.in_flight < self.config.max_inflight_per_replica * self.num_replicas()

    def _below_share(self, tenant: str, priority: int) -> bool:
        """Does `tenant` hold fewer slots than its fair share at `priority`, with nothing of its
        own waiting?"""
        if self.config.fairness != "vtc" or self._is_waiting(tenant):
            return False
        return self._under_share(tenant, priority)

    def _under_share(self, tenant: str, priority: int) -> bool:
        """Does `tenant` hold fewer slots than its fair share at `priority`: the slots over the
        tenants with requests under way or waiting at that priority or a more urgent one (a less
        urgent band takes no share from a more urgent one), or was it served well under its
        share of those tenants' recent tokens (RecentTokens: a light tenant's burst holds many
        slots, few tokens)? Never once twice the slots are under way: the bound on the
        overshoot."""
        slots = self.config.max_inflight_per_replica * self.num_replicas()
        if self.in_flight >= 2 * slots:
            return False
        active = {t for t, p in self.held if p <= priority}
        active |= {t for b in self.bands.values() if b.priority <= priority for t in b.flows}
        if self.slots_held(tenant) < slots // len(active | {tenant}):
            return True
        return self.recent.well_below_share(tenant, active, time.monotonic())

    def _is_waiting(self, tenant: str) -> bool:
        return any(tenant in b.flows for b in self.bands.values())

    def slots_held(self, tenant: str) -> int:
        return sum(n for (t, _), n in self.held.items() if t == tenant)

    def forget(self, tenant: str, priority: int) -> None:
        """One slot of `tenant`'s, taken at `priority`, given back."""
        self.held[tenant, priority] -= 1
        if not self.held[tenant, priority]:
            del self.held[tenant, priority]

    def _grant(self, request: FlowRequest) -> FlowTicket:
        if self.limited:
            self.held[request.tenant, request.priority] += 1
        self.vtc.charge(request.tenant, request.cost_tokens)
        self.recent.add(request.tenant, request.cost_tokens, time.monotonic())
        waited = time.monotonic() - request.arrived
        return FlowTicket(self, request.tenant, request.priority, waited, self.limited)

    def _enqueue(self, request: FlowRequest) -> None:
        band = self.bands.get(request.priority)
        if band is None:
            band = self.bands[request.priority] = Band(
                request.priority, last_served=request.arrived
            )
        if band.size >= self.config.flow_queue_size:
            self._shed_for(band, request.tenant)
        if request.tenant not in band.flows:
            self.vtc.backlogged(request.tenant, band.flows.keys())
            band.flows[request.tenant] = deque()
        request.granted = asyncio.get_running_loop().create_future()
        band.flows[request.tenant].append(request)
        band.size += 1

    def _shed_for(self, band: Band, tenant: str) -> None:
        """Room in a full band for `tenant`'s request: the newest of the tenant with the most
        waiting goes, unless `tenant` has as many waiting (then the newcomer is refused)."""
        heaviest = max(band.flows, key=lambda t: (len(band.flows[t]), self.vtc.counter(t)))
        mine = len(band.flows.get(tenant, ()))
        if heaviest == tenant or len(band.flows[heaviest]) <= mine + 1:
            raise FlowRefused(
                "fleet_saturated",
                f"the fleet is saturated: {band.size} requests of priority {band.priority} "
                "already wait (--flow-queue-size)",
            )
        shed = band.flows[heaviest][-1]
        self._remove(shed)
        assert shed.granted is not None
        shed.granted.set_exception(
            FlowRefused(
                "fleet_saturated",
                "the fleet is saturated and this tenant has the most requests waiting: its "
                "newest gives way to another tenant's",
            )
        )

    def _next(self, now: float) -> FlowRequest:
        """The request the next free slot goes to (see the module's table)."""
        starving = [
            b for b in self.bands.values() if now - b.last_served >= self.config.flow_starvation_s
        ]
        if starving:
            band = min(starving, key=lambda b: b.last_served)
        else:
            band = self.bands[min(self.bands)]
        band.last_served = now
        if self.config.fairness == "fcfs":
            return min((q[0] for q in band.flows.values()), key=lambda r: r.arrived)
        return band.flows[self.vtc.pick(list(band.flows))][0]

    def _remove(self, request: FlowRequest) -> None:
        band = self.bands[request.priority]
        queue = band.flows[request.tenant]
        queue.remove(request)
        band.size -= 1
        if not queue:
            del band.flows[request.tenant]
        if not band.size:
            del self.bands[request.priority]

    def _leave(self, request: FlowRequest) -> None:
        """A waiter that will not go (timed out, shed, its client gone): out of its queue, and a
        slot granted to it as it left given back."""
        granted = request.granted
        assert granted is not None
        if not granted.done():
            granted.cancel()
            self._remove(request)
        elif not granted.cancelled() and granted.exception() is None:
            granted.result().release()
