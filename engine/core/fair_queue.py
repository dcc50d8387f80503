"""FairQueue: the waiting queue shared fairly between tenants (EngineConfig.fairness = vtc).

Each tenant with requests waiting has a queue of its own, of the scheduling policy (FCFSQueue and
its wave rule, or PriorityQueue), so a tenant's requests keep the order they always had. To admit
one request, each tenant's queue proposes its next by its own rule, and the first of these by

    (its priority, when scheduling_policy is priority;
     a preempted request before the others: it had been admitted once, and must not be starved
     behind newcomers;
     a light tenant's before the others': one holding fewer requests in the engine (running
     or waiting) than its share (the requests held over the tenants holding any), as the
     router lets a tenant holding fewer slots than its share go at once
     (router/flow/flow_controller.py);
     its tenant's virtual token counter: the tenant served the fewest tokens goes first;
     its arrival)

goes. A tenant's waiting requests count as held: a heavy tenant whose prompts have just come
(the router releases its backlog as its earlier requests finish) is not taken for a light one
beside a tenant with two running, nor is every tenant light-less in an idle engine.

A step beside running requests whose first newcomer is a light tenant's (or, by priority,
more urgent than the next) prefills no other tenant's newcomer (no less urgent one) beside it,
and the scheduler leaves those tenants' prompt chunks under way out of it too: the light tenant's
time to first token is one short step, not a step swollen by a heavy tenant's prompts, which
follow in the next (`shares_step`).

The scheduler charges each tenant's counter with the tokens it computes for it (prompt
tokens as they are prefilled, one per decoded token: `charge`). A tenant whose first request
starts waiting is lifted to the lowest counter of the tenants already waiting (when none is, to
the counter of the last tenant that stopped waiting), so an idle tenant banks no credit
(pagedock/tenancy/fair_share.py).

With one tenant waiting (every request of an engine without tenants is "default"), `select` is
that tenant's queue's own rule: the order, and nearly the cost, of a plain queue.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Iterator, Mapping

from engine.core.request import Request, RequestStatus
from engine.core.request_queue import RequestQueue, make_request_queue
from engine.lora.slots import LoRASlots
from pagedock.tenancy.fair_share import VirtualTokenCounter

FAIRNESS_POLICIES = ("vtc", "fcfs")


class FairQueue:
    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.fair_share = VirtualTokenCounter()
        self._queues: dict[str, RequestQueue] = {}
        """The tenants with requests waiting, in the order they started waiting (never empty)."""
        self._num_waiting = 0
        self._last_left: str | None = None
        """The tenant that last stopped waiting: whom a tenant that starts waiting alone joins."""
        self._light: frozenset[str] = frozenset()
        """This step's light tenants (`begin_step`)."""
        self._busy = False
        """Whether this step's newcomers join running requests (`begin_step`)."""

    def add(self, request: Request) -> None:
        self._queue_of(request.tenant).add(request)
        self._num_waiting += 1

    def prepend(self, request: Request) -> None:
        self._queue_of(request.tenant).prepend(request)
        self._num_waiting += 1

    def peek(self) -> Request:
        """The head of the tenant that has waited longest (not necessarily what `select`
        proposes: that is the tenants' turn to decide)."""
        return self._first()[1].peek()

    def pop(self) -> Request:
        """Take `peek()`'s request."""
        tenant, queue = self._first()
        request = queue.pop()
        self._taken(tenant, queue)
        return request

    def remove(self, request: Request) -> None:
        queue = self._queues[request.tenant]
        if queue.peek() is request:
            queue.pop()  # the usual case: O(1), or O(log n) for a priority queue
        else:
            queue.remove(request)
        self._taken(request.tenant, queue)

    def __len__(self) -> int:
        return self._num_waiting

    def __iter__(self) -> Iterator[Request]:
        """Every waiting request: tenant by tenant, each in its queue's order."""
        return itertools.chain.from_iterable(self._queues.values())

    def tenants(self) -> Collection[str]:
        """The tenants with requests waiting."""
        return self._queues.keys()

    def charge(self, tenant: str, num_tokens: int) -> None:
        self.fair_share.charge(tenant, num_tokens)

    def held(self, running: Collection[Request]) -> Counter[str]:
        """The requests each tenant holds in the engine: running beside `running`, or waiting."""
        per_tenant = Counter(r.tenant for r in running)
        per_tenant.update({tenant: len(queue) for tenant, queue in self._queues.items()})
        return per_tenant

    def begin_step(self, running: Collection[Request]) -> None:
        """Which waiting tenants are light beside `running`: holding fewer requests (running or
        waiting) than their share, the requests held over the tenants holding any (`is_light`)."""
        held = self.held(running)
        self._light = frozenset(t for t in self._queues if is_light(held, t))
        self._busy = bool(running)

    def shares_step(self, first: Request, request: Request) -> bool:
        if self._busy and self.policy == "priority" and request.priority > first.priority:
            return False
        return request.tenant == first.tenant or first.tenant not in self._light

    def select(self, lora_slots: LoRASlots | None = None) -> Request | None:
        """The request to admit next: each tenant's by its queue's rule, then the first of those
        by (priority, preempted first, light first, counter, arrival); None when none can run
        now."""
        if len(self._queues) == 1:
            return next(iter(self._queues.values())).select(lora_slots)
        best: Request | None = None
        best_key: tuple[int, bool, bool, float, float] | None = None
        for tenant, queue in self._queues.items():
            request = queue.select(lora_slots)
            if request is None:
                continue
            key = self._order(tenant, queue, request)
            if best_key is None or key < best_key:
                best, best_key = request, key
        return best

    def _order(
        self, tenant: str, queue: RequestQueue, request: Request
    ) -> tuple[int, bool, bool, float, float]:
        priority = request.priority if self.policy == "priority" else 0
        # NOTE: a preempted request goes back to its queue's head (FCFS) or its place by arrival
        # (priority): the head tells whether the tenant holds one.
        fresh = queue.peek().status != RequestStatus.PREEMPTED
        heavy = tenant not in self._light
        return priority, fresh, heavy, self.fair_share.counter(tenant), request.arrival_time

    def _first(self) -> tuple[str, RequestQueue]:
        if not self._queues:
            raise IndexError("the waiting queue is empty")
        return next(iter(self._queues.items()))

    def _queue_of(self, tenant: str) -> RequestQueue:
        queue = self._queues.get(tenant)
        if queue is None:
            others: Collection[str] = self._queues.keys()
            if not others and self._last_left is not None:
                others = (self._last_left,)
            self.fair_share.backlogged(tenant, others)
            queue = self._queues[tenant] = make_request_queue(self.policy)
        return queue

    def _taken(self, tenant: str, queue: RequestQueue) -> None:
        self._num_waiting -= 1
        if not len(queue):
            del self._queues[tenant]
            self._last_left = tenant


def is_light(held: Mapping[str, int], tenant: str) -> bool:
    """Whether `tenant` holds fewer requests than its share of `held` (the requests each tenant
    holds in the engine, running or waiting): never while it is the only tenant."""
    tenants = held.keys() | {tenant}
    if len(tenants) < 2:
        return False
    return held.get(tenant, 0) < sum(held.values()) / len(tenants)


def make_waiting_queue(policy: str, fairness: str = "vtc") -> RequestQueue:
    """The scheduler's waiting queue: shared fairly between tenants (vtc), or one queue of the
    policy for all (fcfs: tenants are not told apart)."""
    if fairness == "vtc":
        return FairQueue(policy)
    if fairness == "fcfs":
        return make_request_queue(policy)
    raise ValueError(f"unknown fairness {fairness!r}; expected one of {FAIRNESS_POLICIES}")
