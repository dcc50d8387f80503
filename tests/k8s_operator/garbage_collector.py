"""Deletion with propagation policies, and the garbage collector, as the API server and the
controller manager do them, on the emulator's store (watchers see every change as events).

A DELETE's policy is its DeleteOptions' `propagationPolicy` (the body's or the query's; the legacy
`orphanDependents` too), else the kind's default: `Orphan` for batch/v1 Jobs and
ReplicationControllers (kept for compatibility), `Background` for everything else.

- Background: the owner goes at once (once its finalizers are gone); the collector then deletes
  each dependent whose every owner is gone.
- Foreground: the owner gets `deletionTimestamp` and the `foregroundDeletion` finalizer and
  stays; the collector deletes its dependents (foreground again for a dependent that has
  dependents of its own) and removes the finalizer once no dependent with
  `blockOwnerDeletion: true` is left, which lets the owner go.
- Orphan: the owner gets `deletionTimestamp` and the `orphan` finalizer; the collector removes
  the owner's reference from every dependent, then the finalizer.

A dependent with another owner that is neither gone nor being deleted in the foreground keeps
living: the collector only drops its references to the ones that are. An owner is found by uid,
in the dependent's namespace (or cluster-scoped). The collector runs after every write, until a
pass changes nothing (`collect`)."""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.k8s_operator.emulator import Emulator

Obj = dict[str, Any]
Key = tuple[Any, str | None, str]
FOREGROUND, ORPHAN = "foregroundDeletion", "orphan"
POLICIES = {"Foreground": FOREGROUND, "Orphan": ORPHAN, "Background": None}
ORPHAN_BY_DEFAULT = {("batch", "v1", "jobs"), ("", "v1", "replicationcontrollers")}


def requested_policy(request: Any) -> str:
    """The DELETE's propagation policy, or the kind's default."""
    body = request.data if isinstance(request.data, dict) else {}
    policy = request.params.get("propagationPolicy") or body.get("propagationPolicy")
    if policy in POLICIES:
        return str(policy)
    orphan = body.get("orphanDependents", request.params.get("orphanDependents"))
    if orphan is not None:
        return "Orphan" if orphan in (True, "true") else "Background"
    resource = request.resource
    return (
        "Orphan"
        if (resource.group, resource.version, resource.plural) in ORPHAN_BY_DEFAULT
        else "Background"
    )


def _finalizers(raw: Obj) -> list[str]:
    return list(raw.get("metadata", {}).get("finalizers") or [])


def _deleting(raw: Obj, finalizer: str) -> bool:
    meta = raw.get("metadata", {})
    return bool(meta.get("deletionTimestamp")) and finalizer in (meta.get("finalizers") or [])


class GarbageCollector:
    """The collector of one emulator: `delete` marks or removes one object as a DELETE with a
    policy does; `wake` runs the collector soon; `collect` runs it now."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def wake(self) -> None:
        """Collect once the current request is answered (again, if one is under way)."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            await self.collect()

    async def collect(self) -> None:
        """Garbage-collect until a pass changes nothing."""
        async with self.emulator.store_lock:
            while await self._pass():
                pass

    async def delete(self, key: Key, policy: str) -> None:
        """What a DELETE with `policy` does to the stored object (under the store's lock)."""
        raw = self.emulator.objects[key].raw
        finalizer = POLICIES[policy]
        if finalizer is not None and not raw["metadata"].get("deletionTimestamp"):
            finalizers = _finalizers(raw) + ([] if finalizer in _finalizers(raw) else [finalizer])
            await self._patch(
                key, {"metadata": {"deletionTimestamp": _now(), "finalizers": finalizers}}
            )
        elif finalizer is None and _finalizers(raw):
            if not raw["metadata"].get("deletionTimestamp"):
                await self._patch(key, {"metadata": {"deletionTimestamp": _now()}})
        elif finalizer is None:
            await self.emulator.publish_deleted(key)

    async def _pass(self) -> bool:
        """One pass over the store; whether it changed anything."""
        live = {key: obj.raw for key, obj in list(self.emulator.objects.items()) if not obj.deleted}
        by_uid = {raw["metadata"].get("uid"): (key, raw) for key, raw in live.items()}
        for key, raw in live.items():
            if _deleting(raw, ORPHAN) and await self._orphan(key, raw, live):
                return True
            if _deleting(raw, FOREGROUND) and await self._finish_foreground(key, raw, live):
                return True
        for key, raw in live.items():
            if await self._collect_dependent(key, raw, by_uid, live):
                return True
        return False

    async def _collect_dependent(
        self, key: Key, raw: Obj, by_uid: dict[Any, tuple[Key, Obj]], live: dict[Key, Obj]
    ) -> bool:
        """Delete a dependent whose owners are all gone or deleting in the foreground, or drop
        its references to those when another owner stays."""
        refs = raw["metadata"].get("ownerReferences") or []
        if not refs or raw["metadata"].get("deletionTimestamp"):
            return False
        gone, waiting, solid = [], [], []
        for ref in refs:
            owner = by_uid.get(ref.get("uid"))
            if owner is None or owner[0][1] not in (None, key[1]):
                gone.append(ref)
            elif _deleting(owner[1], FOREGROUND):
                waiting.append(ref)
            else:
                solid.append(ref)
        if not gone and not waiting:
            return False
        if solid:
            await self._patch(key, {"metadata": {"ownerReferences": solid}})
            return True
        uid = raw["metadata"].get("uid")
        has_dependents = any(_refers_to(other, uid) for other in live.values())
        blocking = any(ref.get("blockOwnerDeletion") for ref in waiting)
        await self.delete(key, "Foreground" if blocking and has_dependents else "Background")
        return True

    async def _orphan(self, key: Key, raw: Obj, live: dict[Key, Obj]) -> bool:
        uid = raw["metadata"].get("uid")
        for dependent_key, dependent in live.items():
            if _refers_to(dependent, uid):
                refs = dependent["metadata"]["ownerReferences"]
                kept = [ref for ref in refs if ref.get("uid") != uid]
                await self._patch(dependent_key, {"metadata": {"ownerReferences": kept or None}})
        await self._drop_finalizer(key, raw, ORPHAN)
        return True

    async def _finish_foreground(self, key: Key, raw: Obj, live: dict[Key, Obj]) -> bool:
        uid = raw["metadata"].get("uid")
        for dependent in live.values():
            refs = dependent["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == uid and ref.get("blockOwnerDeletion") for ref in refs):
                return False  # the collector deletes it (or waits for its finalizers)
        await self._drop_finalizer(key, raw, FOREGROUND)
        return True

    async def _drop_finalizer(self, key: Key, raw: Obj, finalizer: str) -> None:
        kept = [f for f in _finalizers(raw) if f != finalizer]
        await self._patch(key, {"metadata": {"finalizers": kept or None}})

    async def _patch(self, key: Key, changes: Obj) -> None:
        """Change the stored object as a merge patch does, and delete it when it is being
        deleted and has no finalizers left (as kmock does after a write)."""
        await self.emulator.publish_patched(key, changes)
        raw = self.emulator.objects[key].raw
        if raw["metadata"].get("deletionTimestamp") and not _finalizers(raw):
            await self.emulator.publish_deleted(key)


def _refers_to(raw: Obj, uid: Any) -> bool:
    refs = raw.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
