"""Discovery routes to ready endpoints that are not terminating: a deleted engine pod leaves the
candidate set before its preStop sleep and drain, as Kubernetes marks it."""

from __future__ import annotations

from kubernetes_asyncio.client import (
    DiscoveryV1EndpointPort,
    V1Endpoint,
    V1EndpointConditions,
    V1EndpointSlice,
    V1ObjectMeta,
)

from router.replicas.discovery.kubernetes import slice_urls


def endpoint(ip: str, **conditions: bool | None) -> V1Endpoint:
    return V1Endpoint(addresses=[ip], conditions=V1EndpointConditions(**conditions))


def test_terminating_and_unready_endpoints_take_no_new_requests() -> None:
    endpoint_slice = V1EndpointSlice(
        address_type="IPv4",
        metadata=V1ObjectMeta(name="engines-abc"),
        ports=[DiscoveryV1EndpointPort(name="http", port=8000)],
        endpoints=[
            endpoint("10.0.0.1", ready=True, serving=True, terminating=False),
            # Deleted, still serving its streams: Kubernetes keeps it with these conditions.
            endpoint("10.0.0.2", ready=False, serving=True, terminating=True),
            endpoint("10.0.0.3", ready=None, serving=True, terminating=True),
            endpoint("10.0.0.4", ready=False, serving=False, terminating=False),
            endpoint("10.0.0.5"),  # no conditions reported: ready
        ],
    )
    assert slice_urls(endpoint_slice, None) == ["http://10.0.0.1:8000", "http://10.0.0.5:8000"]
