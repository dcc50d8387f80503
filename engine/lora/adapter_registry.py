"""The adapters an engine serves, by name, with their paths and ids (torch-free).

An adapter is served from when it is loaded (at start, or at run time by `add_lora`) until it is
unloaded; it is then *unloading* until its last queued or running request has finished, when its
slot and weights are released. Requests name adapters by name; each load also gets an integer id
(vLLM's `lora_int_id`, the `lora_id` of KV events), 1-based, in load order, never reused within
the process: a name unloaded and loaded again gets a new one.

Written on the engine thread only (LLMEngine is not thread-safe); read from any thread (the input
processor checks requests on the event loop, the server lists the adapters). Every change replaces
the dicts rather than mutating them, so a reader always sees one whole state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ServedAdapter:
    """One load of an adapter: its name, its id, the path it was loaded from and the root its
    requests' block hashes chain from (hex; engine/core/kv_cache_manager.py set_adapter_weights)."""

    name: str
    lora_id: int
    path: str
    kv_root: str = ""


class LoRARegistry(Mapping[str, str]):
    """The served adapters as a mapping {name: path} (what the input processor checks requests
    against), plus their ids and the adapters still unloading."""

    def __init__(self) -> None:
        self._served: dict[str, ServedAdapter] = {}
        self._unloading: dict[str, ServedAdapter] = {}
        self._next_id = 1
        self._ever_served: frozenset[str] = frozenset()

    # ---- the mapping {name: path} of the served adapters -------------------------------------

    def __getitem__(self, name: str) -> str:
        return self._served[name].path

    def __iter__(self) -> Iterator[str]:
        return iter(self._served)

    def __len__(self) -> int:
        return len(self._served)

    # ---- what callers may know ----------------------------------------------------------------

    def adapters(self) -> list[ServedAdapter]:
        """The served adapters, in load order."""
        return sorted(self._served.values(), key=lambda a: a.lora_id)

    def adapter(self, name: str) -> ServedAdapter | None:
        """The served adapter `name`, or None."""
        return self._served.get(name)

    def lora_id(self, name: str) -> int | None:
        """The id of the adapter `name`, served or still unloading; None for no such adapter."""
        adapter = self._served.get(name) or self._unloading.get(name)
        return None if adapter is None else adapter.lora_id

    def name_of(self, lora_id: int) -> str | None:
        """The served adapter with id `lora_id`, by name; None when none is."""
        return next((a.name for a in self._served.values() if a.lora_id == lora_id), None)

    @property
    def unloading(self) -> list[str]:
        """Adapters unloaded while requests for them were queued or running."""
        return list(self._unloading)

    def was_served(self, name: str) -> bool:
        """Whether an adapter of this name was served before in this process."""
        return name in self._ever_served

    # ---- changes (engine thread) --------------------------------------------------------------

    def add(self, name: str, path: str, kv_root: str = "") -> ServedAdapter:
        """Serve `name` from `path` under a new id; ValueError for a name served or unloading (the
        caller checks first)."""
        if name in self._served or name in self._unloading:
            raise ValueError(f"LoRA adapter {name!r} is already registered")
        adapter = ServedAdapter(name, self._next_id, path, kv_root)
        self._next_id += 1
        self._served = {**self._served, name: adapter}
        self._ever_served = self._ever_served | {name}
        return adapter

    def remove(self, name: str) -> ServedAdapter:
        """Stop serving `name`: it is unloading until `finish_unloading`. KeyError when it is not
        served."""
        served = dict(self._served)
        adapter = served.pop(name)
        self._served = served
        self._unloading = {**self._unloading, name: adapter}
        return adapter

    def finish_unloading(self, name: str) -> None:
        """The unloading adapter `name` has no request left: forget it."""
        unloading = dict(self._unloading)
        del unloading[name]
        self._unloading = unloading
