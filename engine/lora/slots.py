"""The max_loras weight slots, as the scheduler hands them out (torch-free; vLLM: max_loras).

A request for an adapter is admitted only with a slot: its adapter's own when the adapter is
resident, else a free slot, else the least recently used idle one (its adapter is evicted). A
slot is pinned while any request of its adapter runs (from admission until it is preempted or
finishes), so an adapter with running requests is never evicted. When every slot is pinned by
other adapters, a request for a new adapter waits in the queue until one goes idle; requests
behind it for the base model or a resident adapter pass it meanwhile (Scheduler._next_waiting).

The model runner follows the assignment: a step's requests carry their slot and adapter name,
and the runner loads an adapter's weights into a slot whose content differs
(engine/lora/lora_manager.py).
"""

from __future__ import annotations

from collections import OrderedDict


class LoRASlots:
    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be at least 1, got {num_slots}")
        # The adapter resident in each slot (None: empty), and its running requests.
        self.names: list[str | None] = [None] * num_slots
        self.pins: list[int] = [0] * num_slots
        self._by_name: dict[str, int] = {}
        # Resident slots with no running request, least recently used first.
        self._idle: OrderedDict[int, None] = OrderedDict()
        # Adapters placed into a slot (each a load of its weights by the runner), and idle
        # adapters that gave up their slot to another.
        self.num_loads = 0
        self.num_evictions = 0

    def slot_of(self, name: str) -> int | None:
        return self._by_name.get(name)

    def can_acquire(self, name: str | None) -> bool:
        """Whether a request for `name` (None: the base model) could be admitted now."""
        return name is None or name in self._by_name or bool(self._idle) or None in self.names

    def acquire(self, name: str) -> int:
        """Pin `name`'s slot for one more running request, placing the adapter first when it is
        not resident. ValueError when no slot can take it (check `can_acquire` first)."""
        slot = self._by_name.get(name)
        if slot is None:
            slot = self._place(name)
        self._idle.pop(slot, None)
        self.pins[slot] += 1
        return slot

    def release(self, slot: int) -> None:
        """One running request of the slot's adapter is done with it (preempted or finished)."""
        if self.pins[slot] < 1:
            raise ValueError(f"slot {slot} is not pinned")
        self.pins[slot] -= 1
        if self.pins[slot] == 0:
            self._idle[slot] = None  # the most recently used idle slot

    def forget(self, name: str) -> None:
        """`name` was unloaded and has no running request: its slot, if it has one, is empty
        again (a later load of the same name is placed, and its weights loaded, afresh)."""
        slot = self._by_name.get(name)
        if slot is None:
            return
        if self.pins[slot]:
            raise ValueError(f"LoRA adapter {name!r} still has running requests in slot {slot}")
        del self._by_name[name]
        self._idle.pop(slot, None)
        self.names[slot] = None

    @property
    def running_adapters(self) -> list[str]:
        """The adapters with running requests."""
        return sorted(n for n, pins in zip(self.names, self.pins, strict=True) if n and pins)

    def _place(self, name: str) -> int:
        if None in self.names:
            slot = self.names.index(None)
        elif self._idle:
            slot, _ = self._idle.popitem(last=False)
            evicted = self.names[slot]
            assert evicted is not None
            del self._by_name[evicted]
            self.num_evictions += 1
        else:
            raise ValueError(f"no LoRA slot for {name!r}: every slot has running requests")
        self.names[slot] = name
        self._by_name[name] = slot
        self.num_loads += 1
        return slot
