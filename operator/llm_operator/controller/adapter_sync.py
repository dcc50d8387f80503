"""Every ready engine replica serves exactly the declared LoRA adapters, without a restart.

Each reconcile pass of an LLMDeployment with LoRA on (a spec change, a child's event such as an
engine pod turning ready, the resync):
  1. the adapters' Jobs (adapter_delivery.py): files not in place yet are not loaded;
  2. GET /v1/models of every ready engine pod;
  3. POST /v1/unload_lora_adapter, awaited, for each adapter a replica serves that is no longer
     declared (the engine lets its running requests finish);
  4. POST /v1/load_lora_adapter for each declared adapter a replica lacks, in the background (an
     hf:// adapter may take a while to fetch); when one ends, the deployment is reconciled again
     so that status shows it at once;
  5. status.adapters from what the replicas listed, the Jobs and the engines' refusals.
A new or restarted pod gets every adapter the same way once it is ready: its Ready event starts a
pass. An engine's refusal (4xx: a bad adapter, its reason in OpenAI's error shape) is asked again
after REFUSAL_RETRY_SECONDS or when the adapter's source changes; an engine that cannot be reached
or fails (5xx) at the next pass.
"""

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from llm_operator.builders import BuildContext
from llm_operator.builders.adapter_source import AdapterSource, adapter_sources
from llm_operator.controller.adapter_delivery import EmitFn, deliver_adapters
from llm_operator.controller.engine_key import engine_api_key
from llm_operator.fleet.adapter_client import EngineAdapterError, EngineAdapters
from llm_operator.fleet.adapter_status import (
    Delivery,
    EngineView,
    adapter_status,
    plan_actions,
)
from llm_operator.k8s.kube import KubeClient
from llm_operator.k8s.resources import POD
from llm_operator.names import ENGINE_PORT, selector_labels, selector_string

Obj = dict[str, Any]
logger = logging.getLogger(__name__)
REFUSAL_RETRY_SECONDS = 300.0
LoadKey = tuple[str, str, str, str, str]
"""(namespace, LLMDeployment, pod uid, adapter name, lora path)."""


@dataclasses.dataclass(frozen=True)
class Refusal:
    pod: str
    message: str
    at: float


@dataclasses.dataclass
class AdapterSync:
    kube: KubeClient
    on_loaded: Callable[[str, str], None]
    """(namespace, name): a background load ended; reconcile that LLMDeployment again."""
    port: int = ENGINE_PORT
    list_timeout_seconds: float = 5.0
    load_timeout_seconds: float = 900.0
    _loads: dict[LoadKey, asyncio.Task[None]] = dataclasses.field(default_factory=dict)
    _refusals: dict[LoadKey, Refusal] = dataclasses.field(default_factory=dict)

    def forget(self, namespace: str, name: str) -> None:
        for key in [k for k in self._loads if k[:2] == (namespace, name)]:
            self._loads.pop(key).cancel()
        for key in [k for k in self._refusals if k[:2] == (namespace, name)]:
            del self._refusals[key]

    async def sync(self, body: Mapping[str, Any], ctx: BuildContext, emit: EmitFn) -> list[Obj]:
        """Steps 1-5 above; the status.adapters entries, in declaration order."""
        sources = adapter_sources(ctx)
        deliveries = await deliver_adapters(self.kube, body, ctx, sources, emit)
        try:
            api_key = await engine_api_key(self.kube, ctx)
        except ValueError as error:  # the engines' key cannot be read: nothing can be loaded
            return [_unloadable(source, deliveries[source.name], str(error)) for source in sources]
        pods = await self.kube.list(
            POD.collection_path(ctx.namespace), selector_string(selector_labels(ctx.name, "engine"))
        )
        timeout = aiohttp.ClientTimeout(total=self.list_timeout_seconds)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            clients = {pod["metadata"]["uid"]: self._client(session, pod, api_key) for pod in pods}
            engines = await asyncio.gather(
                *(_view(pod, clients[pod["metadata"]["uid"]]) for pod in ready_pods(pods))
            )
            actions = plan_actions(sources, deliveries, engines)
            for engine, adapter in actions.unloads:
                await _unload(clients[engine.uid], engine, adapter)
        self._drop_gone(ctx, {engine.uid for engine in engines})
        for engine, source in actions.loads:
            self._start_load(ctx, engine, source, api_key)
        return [
            adapter_status(
                source, deliveries[source.name], engines, self._refusal(ctx, engines, source)
            )
            for source in sources
        ]

    def _client(
        self, session: aiohttp.ClientSession, pod: Obj, api_key: str | None
    ) -> EngineAdapters:
        ip = (pod.get("status") or {}).get("podIP") or "0.0.0.0"
        host = f"[{ip}]" if ":" in ip else ip
        return EngineAdapters(session, f"http://{host}:{self.port}", api_key)

    def _start_load(
        self, ctx: BuildContext, engine: EngineView, source: AdapterSource, api_key: str | None
    ) -> None:
        key = (ctx.namespace, ctx.name, engine.uid, source.name, source.lora_path)
        refusal = self._refusals.get(key)
        if key in self._loads or (
            refusal is not None and time.monotonic() - refusal.at < REFUSAL_RETRY_SECONDS
        ):
            return  # already on its way, or refused a short while ago
        task = asyncio.create_task(self._load(key, engine, source, api_key))
        self._loads[key] = task

    async def _load(
        self, key: LoadKey, engine: EngineView, source: AdapterSource, api_key: str | None
    ) -> None:
        timeout = aiohttp.ClientTimeout(total=self.load_timeout_seconds)
        ip = f"[{engine.ip}]" if ":" in engine.ip else engine.ip
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                client = EngineAdapters(session, f"http://{ip}:{self.port}", api_key)
                await client.load(source.name, source.lora_path)
            self._refusals.pop(key, None)
            logger.info(
                "pod %s loaded adapter %s from %s", engine.pod, source.name, source.lora_path
            )
        except EngineAdapterError as error:
            logger.warning("pod %s did not load adapter %s: %s", engine.pod, source.name, error)
            if not error.refused:
                return  # unreachable or failing: the next pass asks again
            self._refusals[key] = Refusal(engine.pod, error.message, time.monotonic())
        finally:
            self._loads.pop(key, None)
        self.on_loaded(key[0], key[1])

    def _refusal(
        self, ctx: BuildContext, engines: list[EngineView], source: AdapterSource
    ) -> str | None:
        for engine in engines:
            key = (ctx.namespace, ctx.name, engine.uid, source.name, source.lora_path)
            if (refusal := self._refusals.get(key)) is not None:
                return f"pod {refusal.pod}: {refusal.message}"
        return None

    def _drop_gone(self, ctx: BuildContext, uids: set[str]) -> None:
        """Forget the refusals of pods that are gone (a new pod is asked afresh)."""
        for key in [k for k in self._refusals if k[:2] == (ctx.namespace, ctx.name)]:
            if key[2] not in uids:
                del self._refusals[key]


def ready_pods(pods: list[Obj]) -> list[Obj]:
    """Engine pods that pass their readiness probe, have an IP and are not going away."""
    ready = []
    for pod in pods:
        status = pod.get("status") or {}
        is_ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if is_ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            ready.append(pod)
    return sorted(ready, key=lambda pod: pod["metadata"]["name"])


async def _view(pod: Obj, client: EngineAdapters) -> EngineView:
    meta, ip = pod["metadata"], pod["status"]["podIP"]
    try:
        return EngineView(meta["name"], meta["uid"], ip, await client.served())
    except EngineAdapterError as error:
        return EngineView(meta["name"], meta["uid"], ip, None, error.message)


async def _unload(client: EngineAdapters, engine: EngineView, adapter: str) -> None:
    try:
        await client.unload(adapter)
        logger.info("pod %s unloaded adapter %s", engine.pod, adapter)
    except EngineAdapterError as error:  # the next pass tries again
        logger.warning("pod %s did not unload adapter %s: %s", engine.pod, adapter, error)


def _unloadable(source: AdapterSource, delivery: Delivery, message: str) -> Obj:
    if not delivery.done:
        return adapter_status(source, delivery, [], None)
    return adapter_status(source, delivery, [], message)
