"""One request to the e2e's API server as RBAC sees it: who (the bearer token), the verb, the
resource, and what in its body needs more permissions (ownerReferences that block deletion, the
rules of a Role it writes)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.e2e.client import resource_of


@dataclasses.dataclass(frozen=True)
class ApiRequest:
    """One request as the RBAC check sees it."""

    token: str
    method: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    watch: bool
    blocking_owners: tuple[tuple[str, str], ...] = ()
    """(group, resource) of each ownerReference with blockOwnerDeletion in the body."""
    granted_rules: tuple[dict[str, Any], ...] = ()
    """The rules of a Role or ClusterRole the request writes (RBAC escalation prevention)."""

    @property
    def verb(self) -> str:
        """The RBAC verb: GET is get, list or watch; PATCH patch; PUT update; POST create."""
        if self.method == "GET":
            return "watch" if self.watch else ("get" if self.name else "list")
        if self.method == "DELETE":
            return "delete" if self.name else "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}[self.method]

    def __str__(self) -> str:
        where = f"ns={self.namespace}" if self.namespace else "cluster"
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.verb} {self.group or 'core'}/{what} {self.name or ''} ({where})"


def describe(request: Any) -> ApiRequest:
    authorization = request.headers.get("Authorization", "")
    body = request.data if isinstance(request.data, dict) else {}
    refs = (body.get("metadata") or {}).get("ownerReferences") or []
    owners = [resource_of(ref).split("/") for ref in refs if ref.get("blockOwnerDeletion")]
    rules = body.get("rules") if request.resource.plural in ("roles", "clusterroles") else None
    return ApiRequest(
        token=authorization.removeprefix("Bearer ").strip(),
        method=str(request.method.value if hasattr(request.method, "value") else request.method),
        group=request.resource.group or "",
        resource=request.resource.plural or "",
        subresource=request.subresource,
        namespace=request.namespace,
        name=request.name,
        watch=request.params.get("watch") == "true",
        blocking_owners=tuple((o[0] if len(o) == 3 else "", o[-1]) for o in owners),
        granted_rules=tuple(rules or ()),
    )
