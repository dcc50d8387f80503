"""Replica discovery: a static list, or the EndpointSlices of a Kubernetes Service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from router.config import RouterConfig

OnChange = Callable[[set[str]], None]


class Discovery(Protocol):
    async def run(self, on_change: OnChange) -> None:
        """Report the full set of replica URLs now and after every change, until cancelled."""
        ...


def make_discovery(config: RouterConfig) -> Discovery:
    if config.discovery == "k8s":
        from router.replicas.discovery.kubernetes import KubernetesDiscovery

        assert config.service is not None
        return KubernetesDiscovery(config.service, config.namespace, config.target_port)
    from router.replicas.discovery.static import StaticDiscovery

    return StaticDiscovery(config.replicas)
