"""Cutting a step short for a light tenant's newcomer (docs/tenants.md, "A step cut short").

A step that prefills other tenants' prompts can take a while (a 2,048-token budget is hundreds of
milliseconds on a CPU); a light tenant's request (or, with the priority policy, a more urgent one)
that arrives meanwhile would wait for all of it before its own prompt could start. Instead the
step is abandoned between two layers: the forward pass raises StepInterrupted. A step's progress
is only recorded after its forward pass (Scheduler.update: tokens computed, blocks cached, tokens
sampled), so nothing of the abandoned step counts; the KV rows its first layers wrote are written
again, with the same values, when those tokens are computed. The next step leaves out the other
tenants' prefill chunks (the scheduler does so whenever a step's first newcomer is a light
tenant's or more urgent prompt, by fair_queue.py's shares_step), so the newcomer's prompt runs
beside the running decodes; the chunks follow in the step after.

Whether a newcomer may cut the step in progress is decided on the thread that queues it (`offer`,
the server's event loop), against a snapshot the engine thread took as the step began
(`InterruptibleStep`): the scheduler itself is only ever read by the engine thread. The engine
thread looks between layers (`check`), and cuts only while at most three quarters of the layers
have run: past that, finishing costs the newcomer at most a quarter of a step, and abandoning
would cost the others a whole one. A step that follows a cut step is never cut, so every cut is
followed by a step that completes: a stream of newcomers cannot keep the engine from progressing.
Decode-only steps are never cut (they are short, and there is nothing to defer), nor are steps
under tensor parallelism (the ranks would have to agree where to stop).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.fair_queue import FairQueue, is_light
from engine.core.scheduler_output import ScheduledRequest, SchedulerOutput

if TYPE_CHECKING:
    from engine.core.scheduler import Scheduler


class StepInterrupted(Exception):
    """Raised between two layers of a step a newcomer cut short."""


@dataclass(frozen=True)
class InterruptibleStep:
    """A step with prefill chunks, as it began: who it prefills for, and what each tenant held."""

    prefill_tenants: frozenset[str]
    most_urgent_prefill: int
    """The lowest priority value among the step's prefill chunks (lower runs first)."""
    held: Counter[str]
    """The requests each tenant held in the engine, running or waiting (FairQueue.held)."""
    fair: bool
    """Tenants are told apart (fairness vtc)."""
    by_priority: bool
    """The scheduling policy is priority."""

    def yields_to(self, tenant: str, priority: int, arrived: Counter[str]) -> bool:
        """Whether a request of `tenant` at `priority`, arriving now (after `arrived`: the
        requests queued since the step began, this one included), would be scheduled before the
        other tenants' prefill chunks of this step, in a step without them (fair_queue.py's
        order; its own tenant's chunks may share that step)."""
        if self.by_priority and priority != self.most_urgent_prefill:
            return priority < self.most_urgent_prefill
        if not self.fair or not self.prefill_tenants - {tenant}:
            return False  # no other tenant's chunk to leave out
        return is_light(self.held + arrived, tenant)


def interruptible_step(output: SchedulerOutput, scheduler: Scheduler) -> InterruptibleStep | None:
    """The snapshot of `scheduler`'s step `output`; None for a decode-only step, when no
    newcomer could run next (the running set is full), and when none could go before the step's
    chunks (tenants are not told apart, and the policy is not priority)."""
    waiting = scheduler.waiting
    fair = isinstance(waiting, FairQueue)
    by_priority = scheduler.config.scheduling_policy == "priority"
    if not (fair or by_priority) or len(scheduler.running) >= scheduler.config.max_num_seqs:
        return None
    requests = scheduler.requests
    chunks = [requests[s.request_id] for s in output.scheduled if is_prefill_chunk(s)]
    if not chunks:
        return None
    return InterruptibleStep(
        prefill_tenants=frozenset(r.tenant for r in chunks),
        most_urgent_prefill=min(r.priority for r in chunks),
        held=waiting.held(scheduler.running) if isinstance(waiting, FairQueue) else Counter(),
        fair=fair,
        by_priority=by_priority,
    )


def is_prefill_chunk(scheduled: ScheduledRequest) -> bool:
    """More than one token computed for the request without drafts: part of a prompt (or of a
    preempted request's recompute), not a decode or a verification."""
    return scheduled.num_new_tokens - len(scheduled.draft_token_ids) > 1


class StepInterrupter:
    """The flag between the thread that queues requests and the engine thread's forward pass."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._step: InterruptibleStep | None = None
        self._cut = -1
        """The seq of the step to cut (compared, never cleared: seqs only grow)."""
        self._seq = 0
        self._after_cut = False
        self._arrived: Counter[str] = Counter()
        """The requests queued per tenant since the step in progress began."""
        self.num_interrupted = 0
        """Steps cut short so far."""

    @property
    def cuttable(self) -> bool:
        """Whether the step in progress may be cut."""
        return self._step is not None

    def begin(self, output: SchedulerOutput, scheduler: Scheduler) -> None:
        """Engine thread: `scheduler`'s step `output` starts."""
        step = None
        if self.enabled and not self._after_cut:
            step = interruptible_step(output, scheduler)
        with self._lock:
            self._seq += 1
            self._step = step
            self._arrived = Counter()
            self._after_cut = False

    def end(self) -> None:
        """Engine thread: the step is over (done or cut)."""
        with self._lock:
            self._step = None

    def offer(self, tenant: str, priority: int) -> None:
        """Any thread: a request of `tenant` at `priority` was just queued; cut the step in
        progress if the request would go before its prefill chunks."""
        with self._lock:
            step = self._step
            if step is None:
                return
            self._arrived[tenant] += 1
            if step.yields_to(tenant, priority, self._arrived):
                self._cut = self._seq

    def check(self, layer: int, num_layers: int) -> None:
        """Engine thread, after layer `layer` (0-based) of `num_layers`: StepInterrupted if a
        newcomer asked for this step to be cut and at most three quarters of the layers ran."""
        if self._cut == self._seq and 4 * (layer + 1) <= 3 * num_layers:
            self._cut = -1
            self._after_cut = True
            self.num_interrupted += 1
            raise StepInterrupted
