"""kmock's Kubernetes emulator plus what the operator relies on from a real API server:
uid, resourceVersion, generation, creationTimestamp and generateName on create; a new
resourceVersion on every update and a generation bump on spec changes; equality label selectors on
lists; admission of LLMDeployments as for their CRD (pruning, defaults, the OpenAPI schema and the
CEL rules: admission.py), a refusal storing nothing; a strategic merge patch of a built-in kind
applied with Kubernetes' patch strategies (strategic_merge.py; 415 for a custom resource); a
patch's stale resourceVersion a 409 Conflict; and, on request, a refusal (403, 422, ...) of
writes to one resource, or a whole API group missing (404), as in a cluster without a CRD.
(kmock stores objects as posted and merge-patches them; no GC or controllers.)"""

import datetime
import itertools
import uuid
from typing import Any

import aiohttp.web
import kmock
from kmock._internal.dicts import patch_dict
from llm_operator.api.crd import build_crd

from tests.k8s_operator.admission import Admission
from tests.k8s_operator.field_errors import Invalid
from tests.k8s_operator.strategic_merge import PatchError, is_built_in, strategic_merge

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "pagedock.dev/v1alpha1/llmdeployments": kmock.ResourceInfo(
        kind="LLMDeployment",
        namespaced=True,
        subresources={"status", "scale"},
        verbs={"list", "watch", "get", "patch", "create", "delete", "update"},
    ),
    "apiextensions.k8s.io/v1/customresourcedefinitions": kmock.ResourceInfo(
        kind="CustomResourceDefinition",
        namespaced=False,
        verbs={"list", "watch", "get", "create", "patch"},
    ),
    "v1/namespaces": kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"list", "watch", "get"}
    ),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create"}),
    "apps/v1/deployments": kmock.ResourceInfo(
        kind="Deployment",
        namespaced=True,
        subresources={"status", "scale"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/services": kmock.ResourceInfo(
        kind="Service",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/pods": kmock.ResourceInfo(
        kind="Pod",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "batch/v1/jobs": kmock.ResourceInfo(
        kind="Job",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/secrets": kmock.ResourceInfo(
        kind="Secret", namespaced=True, verbs={"list", "watch", "get", "create"}
    ),
    "v1/persistentvolumeclaims": kmock.ResourceInfo(
        kind="PersistentVolumeClaim",
        namespaced=True,
        verbs={"list", "watch", "get", "create"},
    ),
}
STRATEGIC = "application/strategic-merge-patch+json"
UNSUPPORTED_SMP = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
ADMISSIONS: dict[str, Admission] = {"pagedock.dev/v1alpha1/llmdeployments": Admission(build_crd())}
_versions = itertools.count(1000)


class Emulator(kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.refusals: dict[tuple[kmock.action, str], kmock.KubernetesError] = {}
        self.missing_groups: set[str] = set()
        self.admissions: dict[str, Admission] = dict(ADMISSIONS)
        """The custom resources whose writes go through admission, by resource."""

    def refuse(self, action: kmock.action, resource: str, status: int, message: str) -> None:
        """Answer every `action` (CREATE, UPDATE) on `resource` with this error, as an API server
        does for RBAC (403) or validation (422); `allow` lifts it."""
        reason = {403: "Forbidden", 422: "Invalid"}.get(status, "BadRequest")
        self.refusals[action, resource] = kmock.KubernetesError(status, reason, message, {})

    def allow(self, action: kmock.action, resource: str) -> None:
        self.refusals.pop((action, resource), None)

    def uninstall(self, group: str) -> None:
        """Serve no resource of this API group, as a cluster without its CRDs: every request
        under it is a 404 (`install` undoes it)."""
        self.missing_groups.add(group)

    def install(self, group: str) -> None:
        self.missing_groups.discard(group)

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.resource.group in self.missing_groups:
            raise kmock.KubernetesError(
                404, "NotFound", "the server could not find the requested resource", {}
            )
        for (action, resource), error in self.refusals.items():
            if request.action == action and request.resource == resource:
                raise error  # before kmock's own _handle, which would store the object
        data = request.data if isinstance(request.data, dict) else None
        if request.action == kmock.action.UPDATE and data is not None:
            self._as_merge_patch(request, data)
        if request.resource is not None and data is not None:
            if request.action == kmock.action.CREATE:
                _stamp_new(data)
            elif request.action == kmock.action.UPDATE:
                data.setdefault("metadata", {})["resourceVersion"] = str(next(_versions))
                if request.subresource is None:
                    self._bump_generation(request, data)
        self._admit(request)
        return await super()._handle(request)

    def _as_merge_patch(self, request: Any, data: dict[str, Any]) -> None:
        """Check a patch's resourceVersion precondition (409 when stale), and turn a strategic
        merge patch of a built-in kind into the JSON merge patch with the same result, which
        kmock applies (415 for a custom resource, as the API server answers)."""
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return  # kmock answers 404
        old = self.objects[key].raw
        wanted = (data.get("metadata") or {}).get("resourceVersion")
        current = old.get("metadata", {}).get("resourceVersion")
        if wanted is not None and wanted != current:
            raise kmock.KubernetesError(409, "Conflict", _conflict(request), {})
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type != STRATEGIC or request.subresource == "scale":
            return
        if not is_built_in(old.get("apiVersion", ""), old.get("kind", "")):
            raise kmock.KubernetesError(415, "UnsupportedMediaType", UNSUPPORTED_SMP, {})
        try:
            merged = strategic_merge(old, data)
        except PatchError as error:
            raise kmock.KubernetesError(400, "BadRequest", str(error), {}) from None
        patch = merge_patch_between(old, merged)
        data.clear()
        data.update(patch)

    def _admit(self, request: Any) -> None:
        """Raise the API server's 422 when admission refuses a write (a create, or a patch of the
        object, its status or its scale, on its merged result), else make the request's body
        store what the API server would (pruned and defaulted). A status write skips the CEL
        rules (they are all on spec)."""
        admission = next((a for r, a in self.admissions.items() if request.resource == r), None)
        writes = (kmock.action.CREATE, kmock.action.UPDATE)
        if admission is None or request.action not in writes or request.data is None:
            return
        old = None
        if request.action == kmock.action.UPDATE:
            key = (request.resource, request.namespace, request.name)
            if key not in self.objects or self.objects[key].deleted:
                return  # kmock answers 404
            old = self.objects[key].raw
        obj = request.data if old is None else dict(patch_dict(old, request.data))  # as kmock's
        try:
            admitted = admission.admit(obj, old, rules=request.subresource != "status")
        except Invalid as error:
            status = (error.status, error.reason, error.message, error.details)
            raise kmock.KubernetesError(*status) from None
        if admitted != obj:
            _rewrite(request.data, old, admitted)

    async def _serve_list(self, request: Any) -> Any:
        listing: dict[str, Any] = await super()._serve_list(request)  # type: ignore[assignment]
        wanted = _parse_selector(request.params.get("labelSelector", ""))
        listing["items"] = [
            item
            for item in listing["items"]
            if wanted.items() <= item.get("metadata", {}).get("labels", {}).items()
        ]
        return listing

    def _bump_generation(self, request: Any, data: dict[str, Any]) -> None:
        if "spec" not in data:
            return
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return
        generation = self.objects[key].get("metadata", {}).get("generation", 1)
        data.setdefault("metadata", {})["generation"] = generation + 1


def _rewrite(body: Any, old: dict[str, Any] | None, admitted: dict[str, Any]) -> None:
    """Make a create's body the admitted object, a merge patch's the diff from `old` to it, and
    end a JSON patch with replacing the whole object by it.

    NOTE: in place, since kmock matches its reactions to the request it logged (its log shows
    what was stored, then). kmock stores under a lock another write may hold: a merge patch from
    the stored object keeps what that write changes meanwhile, as kmock's merge always did, and
    a JSON patch keeps its own operations (kopf's `test` of the resourceVersion first)."""
    if isinstance(body, dict):
        patch = admitted if old is None else _diff(old, admitted)
        body.clear()
        body.update(patch)
    else:
        body.append({"op": "replace", "path": "", "value": admitted})


def _diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The merge patch (RFC 7386) that turns `old` into `new`."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            if nested := _diff(old[key], value):
                patch[key] = nested
        elif key not in old or old[key] != value:
            patch[key] = value
    return patch


def _stamp_new(data: dict[str, Any]) -> None:
    meta = data.setdefault("metadata", {})
    if "name" not in meta and "generateName" in meta:
        meta["name"] = meta["generateName"] + uuid.uuid4().hex[:8]
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("resourceVersion", str(next(_versions)))
    meta.setdefault("generation", 1)
    now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta.setdefault("creationTimestamp", now)


def _parse_selector(selector: str) -> dict[str, str]:
    """`a=b,c=d` (equality terms only, which is all the operator sends)."""
    return dict(term.split("=", 1) for term in selector.split(",") if "=" in term)


def merge_patch_between(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that makes `new` of `old`: a key `new` lacks is null, a
    map recurses, anything else that differs is `new`'s value."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = merge_patch_between(before, value)
            if inner:
                patch[key] = inner
        elif key not in old or before != value:
            patch[key] = value
    return patch


def _conflict(request: Any) -> str:
    group = request.resource.group
    qualified = request.resource.plural + (f".{group}" if group else "")
    return (
        f'Operation cannot be fulfilled on {qualified} "{request.name}": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
