"""The waiting queue, by policy: first come first served, or by priority (lower value first), and
which waiting request to admit next. Shared fairly between tenants, a queue of these per tenant
(engine/core/fair_queue.py)."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Collection, Iterator
from typing import Protocol

from engine.core.request import Request
from engine.lora.slots import LoRASlots

# Requests that arrive within this many seconds of the waiting queue's head form its wave, served
# shortest prompt first; at most MAX_WAVE_SCAN of them are compared (a step's admission stays
# cheap).
WAVE_S = 0.1
MAX_WAVE_SCAN = 64


class RequestQueue(Protocol):
    def add(self, request: Request) -> None: ...
    def prepend(self, request: Request) -> None: ...
    def peek(self) -> Request: ...
    def pop(self) -> Request: ...
    def remove(self, request: Request) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Request]: ...
    def select(self, lora_slots: LoRASlots | None = None) -> Request | None:
        """The request to admit next (see next_waiting); None when none can run now."""
        ...

    def charge(self, tenant: str, num_tokens: int) -> None:
        """`num_tokens` were computed for `tenant`'s requests (what fair sharing counts)."""
        ...

    def begin_step(self, running: Collection[Request]) -> None:
        """A step starts admitting newcomers beside the `running` requests."""
        ...

    def shares_step(self, first: Request, request: Request) -> bool:
        """May `request`, selected next, be prefilled in the step whose first newcomer was
        `first`? (No when `first` was put ahead of it for its urgency beside running requests:
        the step stays short for it. An idle engine prefills its newcomers together.)"""
        ...


class FCFSQueue:
    """Arrival order; a preempted request goes back to the front, so it is never starved."""

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def prepend(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)

    def select(self, lora_slots: LoRASlots | None = None) -> Request | None:
        return next_waiting(self, "fcfs", lora_slots)

    def charge(self, tenant: str, num_tokens: int) -> None:
        pass  # arrival order: what a tenant was served changes nothing

    def begin_step(self, running: Collection[Request]) -> None:
        pass

    def shares_step(self, first: Request, request: Request) -> bool:
        return True  # arrival order: no newcomer is more urgent than another


class PriorityQueue:
    """Lowest (priority, arrival_time) first; a preempted request keeps its place by arrival."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._counter = itertools.count()
        self._busy = False
        """Whether this step's newcomers join running requests (`begin_step`)."""

    def add(self, request: Request) -> None:
        key = (request.priority, request.arrival_time, next(self._counter), request)
        heapq.heappush(self._heap, key)

    def prepend(self, request: Request) -> None:
        self.add(request)

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        self._heap = [entry for entry in self._heap if entry[3] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in sorted(self._heap))

    def select(self, lora_slots: LoRASlots | None = None) -> Request | None:
        return next_waiting(self, "priority", lora_slots)

    def charge(self, tenant: str, num_tokens: int) -> None:
        pass  # priority, then arrival: what a tenant was served changes nothing

    def begin_step(self, running: Collection[Request]) -> None:
        self._busy = bool(running)

    def shares_step(self, first: Request, request: Request) -> bool:
        return not self._busy or request.priority <= first.priority


def make_request_queue(policy: str) -> RequestQueue:
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}; expected 'fcfs' or 'priority'")


def next_waiting(
    queue: RequestQueue, policy: str, lora_slots: LoRASlots | None = None
) -> Request | None:
    """The waiting request to admit next (the queue holds at least one). FCFS: the shortest
    prompt of the head's wave (the requests that arrived within WAVE_S of it), so a burst's
    short prompts reach their first token before its long ones, while a later arrival never
    passes an earlier wave. Priority: the head.

    With LoRA (`lora_slots`), a request whose adapter can get no slot now is passed over (it
    waits for one to go idle) and the head is the first request that can run; None when none
    can."""
    if lora_slots is None:
        head: Request | None = queue.peek()
        if policy != "fcfs":
            return head
        candidates: Iterator[Request] = iter(queue)  # the head's wave starts with the head
    else:
        admissible = (r for r in queue if lora_slots.can_acquire(r.lora_name))
        head = next(admissible, None)
        candidates = itertools.chain([] if head is None else [head], admissible)
    if head is None or policy != "fcfs":
        return head
    wave_end = head.arrival_time + WAVE_S
    wave = itertools.takewhile(lambda r: r.arrival_time <= wave_end, candidates)
    return min(itertools.islice(wave, MAX_WAVE_SCAN), key=_remaining)


def _remaining(request: Request) -> int:
    """Tokens the request has yet to compute (the shortest first; the first of equals)."""
    return request.num_tokens - request.num_computed_tokens
