"""KubernetesDiscovery: the ready endpoints of the engines' Service, from its EndpointSlices.

List the Service's EndpointSlices (label `kubernetes.io/service-name`), then watch them from the
list's resourceVersion; every change recomputes the set of replica URLs. A watch that ends or
expires (410 Gone) starts over with a fresh list; API errors are retried with backoff.

Client: kubernetes_asyncio, the official client's asyncio port. It runs on the router's event loop
(the sync `kubernetes` client would block a thread per watch), and it brings the parts that are
hard to get right by hand: in-cluster service-account config with token refresh, kubeconfig with
its auth plugins, typed models, and the watch protocol's resourceVersion bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from router.replicas.discovery import OnChange

logger = logging.getLogger("pagedock.router")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
WATCH_TIMEOUT_S = 300
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 0.5, 10.0


class KubernetesDiscovery:
    def __init__(self, service: str, namespace: str, target_port: str | None = None) -> None:
        self.service = service
        self.namespace = namespace
        self.target_port = target_port
        self._slices: dict[str, Any] = {}
        self._urls: set[str] | None = None

    async def run(self, on_change: OnChange) -> None:
        from kubernetes_asyncio import client

        backoff_s = _BACKOFF_MIN_S
        async with client.ApiClient(configuration=await load_configuration()) as api_client:
            api = client.DiscoveryV1Api(api_client)
            while True:
                started = time.monotonic()
                try:
                    await self._list_and_watch(api, on_change)
                    if time.monotonic() - started < _BACKOFF_MIN_S:  # a watch that ends at once
                        await asyncio.sleep(_BACKOFF_MIN_S)
                    backoff_s = _BACKOFF_MIN_S
                except client.ApiException as e:
                    if e.status != 410:  # 410 Gone: the watch expired, list again at once
                        logger.warning("EndpointSlice watch failed: %s %s", e.status, e.reason)
                        await asyncio.sleep(backoff_s)
                        backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)
                except Exception as e:  # never let discovery die: log, back off, list again
                    logger.warning("EndpointSlice watch failed: %s: %s", type(e).__name__, e)
                    await asyncio.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)

    async def _list_and_watch(self, api: Any, on_change: OnChange) -> None:
        from kubernetes_asyncio import watch

        selector = f"{SERVICE_NAME_LABEL}={self.service}"
        listed = await api.list_namespaced_endpoint_slice(self.namespace, label_selector=selector)
        self._slices = {s.metadata.name: s for s in listed.items if self._is_ours(s)}
        self._report(on_change)
        async with watch.Watch().stream(
            api.list_namespaced_endpoint_slice,
            self.namespace,
            label_selector=selector,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=WATCH_TIMEOUT_S,
        ) as events:
            async for event in events:
                self._apply(event["type"], event["object"])
                self._report(on_change)

    def _apply(self, kind: str, endpoint_slice: Any) -> None:
        if not self._is_ours(endpoint_slice):
            return
        if kind == "DELETED":
            self._slices.pop(endpoint_slice.metadata.name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._slices[endpoint_slice.metadata.name] = endpoint_slice

    def _report(self, on_change: OnChange) -> None:
        urls = {url for s in self._slices.values() for url in slice_urls(s, self.target_port)}
        if urls != self._urls:
            logger.info(
                "Service %s/%s has %d ready endpoints", self.namespace, self.service, len(urls)
            )
            self._urls = urls
            on_change(set(urls))

    def _is_ours(self, endpoint_slice: Any) -> bool:
        meta = endpoint_slice.metadata
        labels = meta.labels or {}
        return bool(
            meta.namespace in (None, self.namespace)
            and labels.get(SERVICE_NAME_LABEL) == self.service
        )


def slice_urls(endpoint_slice: Any, target_port: str | None) -> list[str]:
    """http://address:port of every ready endpoint of one EndpointSlice that is not
    terminating."""
    port = _pick_port(endpoint_slice.ports or [], target_port)
    if port is None:
        return []
    ipv6 = endpoint_slice.address_type == "IPv6"
    urls = []
    for endpoint in endpoint_slice.endpoints or []:
        conditions = endpoint.conditions
        # NOTE: a missing `ready` condition means ready (the API's documented default). A
        # terminating pod (deleted: its preStop, then its drain) takes no new requests, whatever
        # else its conditions say; its streams in flight go on (docs/router.md#rollouts).
        if conditions is not None and (conditions.ready is False or conditions.terminating):
            continue
        for address in endpoint.addresses or []:
            host = f"[{address}]" if ipv6 else address
            urls.append(f"http://{host}:{port}")
    return urls


def _pick_port(ports: list[Any], target_port: str | None) -> int | None:
    for p in ports:
        if target_port is not None and target_port in (p.name, str(p.port)):
            return int(p.port)
    if target_port is not None:
        return None
    named = [p for p in ports if p.name == "http"]
    chosen = named[0] if named else (ports[0] if ports else None)
    return None if chosen is None or chosen.port is None else int(chosen.port)


async def load_configuration() -> Any:
    """In-cluster service-account config inside a pod, else the kubeconfig (as kubectl does)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        # NOTE: read KUBECONFIG now; the client's default location is frozen at its import.
        kubeconfig = os.environ.get("KUBECONFIG")
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return configuration
