"""Where the autoscaler's windows outlive the operator: the ConfigMap `<name>-autoscaler`, owned by
the LLMDeployment (the garbage collector removes it with it), key `state.json` (record.py).

NOTE: a ConfigMap, not the LLMDeployment. An annotation would be a change to the object every
kopf peer watches (a reconcile each write), and status is what was observed, not a controller's
memory. The operator already creates, patches and deletes ConfigMaps (the engine's), so it needs
no further RBAC, and no child watch sees these writes.

Written at a bounded rate: at most once every SAVE_EVERY_S per LLMDeployment, and at once after a
scale decision or when the operator stops (kopf's cleanup). Read when this replica first decides
for an LLMDeployment: after a start, and after becoming kopf's active peer (loop.py forgets the
windows of namespaces where it is not active, so a new leader resumes from the last leader's).
A failed write is a Warning Event `AutoscalerStateNotSaved` naming the server's reason, once
until a write succeeds again; the decisions go on from memory meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.autoscaling import AutoscalingSpec
from llm_operator.autoscaler.events import post_event
from llm_operator.autoscaler.record import Clock, decode, encode
from llm_operator.autoscaler.rule import ScalerState
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import KINDS
from llm_operator.names import child_labels

Obj = dict[str, Any]
Key = tuple[str, str]
logger = logging.getLogger(__name__)
STATE_KEY = "state.json"
SAVE_EVERY_S = 10.0
COMPONENT = "autoscaler"
CONFIG_MAPS = KINDS["ConfigMap"]


def state_name(name: str) -> str:
    return f"{name}-{COMPONENT}"


def build_state_config_map(owner: Mapping[str, Any], text: str) -> Obj:
    meta = owner["metadata"]
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": state_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": child_labels(meta["name"], COMPONENT),
            "ownerReferences": [reference],
        },
        "data": {STATE_KEY: text},
    }


@dataclass
class StateStore:
    kube: KubeClient
    _owners: dict[Key, Obj] = field(default_factory=dict)
    """The LLMDeployment each loaded state belongs to (apiVersion, kind, metadata with its uid)."""
    _saved_at: dict[Key, float] = field(default_factory=dict)
    _exists: set[Key] = field(default_factory=set)
    _failing: set[Key] = field(default_factory=set)

    async def load(
        self, owner: Mapping[str, Any], spec: AutoscalingSpec, clock: Clock
    ) -> ScalerState:
        """The windows recorded for this LLMDeployment, or empty ones (none, stale, unreadable)."""
        meta = owner["metadata"]
        key = (meta["namespace"], meta["name"])
        self._owners[key] = {
            "apiVersion": owner.get("apiVersion"),
            "kind": owner.get("kind"),
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid")},
        }
        self._saved_at[key] = clock.monotonic
        try:
            live = await self.kube.get(CONFIG_MAPS.object_path(key[0], state_name(key[1])))
        except KubeError as error:
            logger.warning("cannot read the autoscaler state of %s/%s: %s", *key, error)
            return ScalerState()
        if live is None:
            return ScalerState()
        self._exists.add(key)
        text = (live.get("data") or {}).get(STATE_KEY, "")
        state = decode(text, str(meta.get("uid")), spec, clock)
        if state is None:
            logger.info("%s/%s: the recorded autoscaler windows are stale, starting afresh", *key)
            return ScalerState()
        logger.info(
            "%s/%s: resumed the autoscaler windows (%d samples, %d recommendations)",
            *key,
            len(state.samples),
            len(state.wants),
        )
        return state

    async def save(self, key: Key, state: ScalerState, clock: Clock, force: bool = False) -> None:
        """Record the windows, unless the last write is recent (and `force` is off)."""
        owner = self._owners.get(key)
        if owner is None:
            return  # never loaded here: nothing of ours to write
        if not force and clock.monotonic - self._saved_at.get(key, 0.0) < SAVE_EVERY_S:
            return
        self._saved_at[key] = clock.monotonic
        text = encode(state, str(owner["metadata"]["uid"]), clock)
        try:
            await self._write(key, owner, text)
        except KubeError as error:
            logger.warning("cannot save the autoscaler state of %s/%s: %s", *key, error)
            if key not in self._failing:
                self._failing.add(key)
                message = f"ConfigMap {state_name(key[1])}: {error.message}"
                await post_event(self.kube, owner, "AutoscalerStateNotSaved", message, "Warning")
            return
        self._failing.discard(key)

    async def _write(self, key: Key, owner: Obj, text: str) -> None:
        path = CONFIG_MAPS.object_path(key[0], state_name(key[1]))
        if key in self._exists:
            try:
                await self.kube.patch(path, {"data": {STATE_KEY: text}})
                return
            except KubeError as error:
                if error.status != 404:
                    raise
        try:
            await self.kube.create(
                CONFIG_MAPS.collection_path(key[0]), build_state_config_map(owner, text)
            )
        except KubeError as error:
            if error.status != 409:
                raise
            await self.kube.patch(path, {"data": {STATE_KEY: text}})
        self._exists.add(key)

    async def discard(self, key: Key) -> None:
        """Autoscaling was turned off: the record goes (a later one starts afresh anyway)."""
        known = key in self._owners
        self.forget(key)
        if known:
            try:
                await self.kube.delete(CONFIG_MAPS.object_path(key[0], state_name(key[1])))
            except KubeError as error:
                logger.warning("cannot delete the autoscaler state of %s/%s: %s", *key, error)

    def forget(self, key: Key) -> None:
        for table in (self._owners, self._saved_at):
            table.pop(key, None)
        self._exists.discard(key)
        self._failing.discard(key)
