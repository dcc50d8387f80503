"""`spec.gateway`: serve through a Gateway API implementation with the Inference Extension.

The operator then renders an InferencePool (inference.networking.k8s.io/v1) of the engine pods
whose endpoint picker is the router (`pagedock route --picker-port`), and, with `httpRoute`, an
HTTPRoute (gateway.networking.k8s.io/v1) whose backend is that pool. Field patterns and limits
are the upstream APIs' own (Inference Extension v1.x, Gateway API v1.x standard channel), so the
API server refuses here what it would refuse on the children.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"{DNS_LABEL}(\.{DNS_LABEL})*"
GATEWAY_DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
Hostname = Annotated[str, Field(min_length=1, max_length=253, pattern=rf"^(\*\.)?{DNS_SUBDOMAIN}$")]
RawObject = Annotated[
    dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
]


class _Model(BaseModel):
    # NOTE: spec.SpecModel's config; spec.py imports this module, so it cannot import spec.py.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )


class GatewayParentRef(_Model):
    name: str = Field(min_length=1, max_length=253)
    """The parent's name (usually a Gateway)."""
    namespace: str | None = Field(None, max_length=63, pattern=rf"^{DNS_LABEL}$")
    """The parent's namespace; this LLMDeployment's when unset (another needs the Gateway's
    listener to allow routes from this namespace)."""
    section_name: str | None = Field(
        None, min_length=1, max_length=253, pattern=rf"^{DNS_SUBDOMAIN}$"
    )
    """One listener of the parent (by name); all of them when unset."""
    port: int | None = Field(None, ge=1, le=65535)
    """One listener port of the parent; all of them when unset."""
    group: str = Field(
        "gateway.networking.k8s.io", max_length=253, pattern=rf"^$|^{DNS_SUBDOMAIN}$"
    )
    """The parent's API group."""
    kind: str = Field(
        "Gateway", min_length=1, max_length=63, pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
    )
    """The parent's kind."""


class HTTPRouteSpec(_Model):
    parent_refs: list[GatewayParentRef] = Field(min_length=1, max_length=32)
    """The Gateways (or their listeners) the route attaches to."""
    hostnames: list[Hostname] = Field(default_factory=list, max_length=16)
    """Host names the route matches; any when empty."""
    path: str = Field("/", pattern=r"^/", max_length=1024)
    """The URL path prefix routed to the pool; other than / is rewritten to / (URLRewrite)."""
    request_timeout: str | None = Field(None, pattern=GATEWAY_DURATION)
    """The whole request's timeout (Gateway API duration, e.g. 600s; 0s = none): long generations
    outlast many gateways' defaults. The gateway's default when unset."""


class GatewaySpec(_Model):
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"
    """What the gateway does when the endpoint picker does not answer: FailClose refuses the
    request, FailOpen sends it to an endpoint of its own choosing."""
    shed_ttft_ms: float = Field(0, ge=0)
    """The picker answers 429 when even the best engine's estimated time to first token exceeds
    this many ms (router --picker-shed-ttft-ms); 0 = never."""
    http_route: HTTPRouteSpec | None = None
    """An HTTPRoute from these Gateways to the pool; unset = write your own (backendRef group
    inference.networking.k8s.io, kind InferencePool, name = this LLMDeployment's)."""
    data_plane_peers: list[RawObject] = Field(default_factory=list)
    """Who may reach the engine port besides the router and metrics scrapers (NetworkPolicyPeer
    objects: the gateway's data-plane pods); empty = any pod, since the gateway's proxies, not
    the router, then connect to the engines."""
