"""The LoRA adapters' side of the fleet, as pure functions: what each ready engine replica must
load or unload so that it serves exactly the declared adapters, and each adapter's status.

An adapter is Downloading while its Job fills the cache claim (Failed when the Job failed), then
Loading until every ready replica lists it in GET /v1/models, then Ready; a replica's refusal to
load it (a 4xx, with the engine's reason) makes it Failed. A replica that did not answer counts
as not serving it (Loading, the message names the pod).
"""

import dataclasses
from typing import Literal

from llm_operator.builders.adapter_source import AdapterSource

Obj = dict[str, object]
DeliveryPhase = Literal["NotNeeded", "Downloading", "Downloaded", "DownloadFailed"]


@dataclasses.dataclass(frozen=True)
class Delivery:
    """Where an adapter's Job (if it needs one) stands."""

    phase: DeliveryPhase
    message: str = ""

    @property
    def done(self) -> bool:
        return self.phase in ("NotNeeded", "Downloaded")


@dataclasses.dataclass(frozen=True)
class EngineView:
    """One ready engine pod, and the adapters it serves (name -> root); None: it did not answer."""

    pod: str
    uid: str
    ip: str
    served: dict[str, str] | None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class AdapterActions:
    unloads: list[tuple[EngineView, str]]
    """(engine, adapter name): not declared, or served from another path (reloaded)."""
    loads: list[tuple[EngineView, AdapterSource]]


def plan_actions(
    sources: list[AdapterSource], deliveries: dict[str, Delivery], engines: list[EngineView]
) -> AdapterActions:
    """The loads and unloads that bring every answering engine to the declared adapters. An
    adapter whose files are not delivered yet is neither loaded nor unloaded."""
    wanted = {source.name: source for source in sources}
    unloads: list[tuple[EngineView, str]] = []
    loads: list[tuple[EngineView, AdapterSource]] = []
    for engine in engines:
        if engine.served is None:
            continue
        for name, root in sorted(engine.served.items()):
            source = wanted.get(name)
            if source is None:
                unloads.append((engine, name))
            elif deliveries[name].done and not _same_path(root, source.lora_path):
                unloads.append((engine, name))
                loads.append((engine, source))
        for source in sources:
            if source.name not in engine.served and deliveries[source.name].done:
                loads.append((engine, source))
    return AdapterActions(unloads, loads)


def adapter_status(
    source: AdapterSource, delivery: Delivery, engines: list[EngineView], refusal: str | None
) -> Obj:
    """One entry of status.adapters; `refusal` is a replica's reason for not loading it."""
    if delivery.phase == "Downloading":
        return _entry(source, "Downloading", "Downloading", delivery.message)
    if delivery.phase == "DownloadFailed":
        return _entry(source, "Failed", "DownloadFailed", delivery.message)
    serving = [e for e in engines if _serves(e, source)]
    if refusal is not None:
        return _entry(source, "Failed", "LoadFailed", refusal, len(serving))
    if not engines:
        message = "waiting for a ready engine replica to load it"
        return _entry(source, "Loading", "NoReadyReplica", message)
    if len(serving) == len(engines):
        message = f"served by all {len(engines)} ready engine replicas"
        return _entry(source, "Ready", "Loaded", message, len(serving))
    missing = [e for e in engines if not _serves(e, source)]
    message = (
        f"{len(serving)}/{len(engines)} ready engine replicas serve it; loading on "
        + ", ".join(f"{e.pod} ({e.error})" if e.error else e.pod for e in missing)
    )
    return _entry(source, "Loading", "Loading", message, len(serving))


def adapters_ready(entries: list[Obj]) -> str:
    """`<Ready>/<declared>`: the Adapters printer column."""
    ready = sum(entry["state"] == "Ready" for entry in entries)
    return f"{ready}/{len(entries)}"


def _serves(engine: EngineView, source: AdapterSource) -> bool:
    if engine.served is None or source.name not in engine.served:
        return False
    return _same_path(engine.served[source.name], source.lora_path)


def _same_path(root: str, lora_path: str) -> bool:
    """The engine lists the path it was given; an engine that lists none is taken at its word."""
    return not root or root.rstrip("/") == lora_path.rstrip("/")


def _entry(
    source: AdapterSource, state: str, reason: str, message: str, ready_replicas: int = 0
) -> Obj:
    return {
        "name": source.name,
        "state": state,
        "reason": reason,
        "message": message,
        "readyReplicas": ready_replicas,
    }


def adapter_warnings(old: list[Obj], new: list[Obj]) -> list[tuple[str, str]]:
    """(reason, message) of a Warning event for each adapter that has just turned Failed, or
    failed for another reason."""
    before = {entry.get("name"): entry for entry in old}
    warnings = []
    for entry in new:
        previous = before.get(entry["name"]) or {}
        failed = entry["state"] == "Failed"
        if failed and (previous.get("reason"), previous.get("message")) != (
            entry["reason"],
            entry["message"],
        ):
            warnings.append(
                (f"Adapter{entry['reason']}", f"adapter {entry['name']}: {entry['message']}")
            )
    return warnings
