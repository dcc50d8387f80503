"""kmock's Kubernetes emulator plus what the operator relies on from a real API server:
uid, resourceVersion, generation, creationTimestamp and generateName on create; a new
resourceVersion on every update and a generation bump on a change beyond metadata and status
(write_results.py); equality label selectors on lists; admission of LLMDeployments as for their
CRD (pruning, defaults, the OpenAPI schema and the CEL rules: admission.py), a refusal storing
nothing; a strategic merge patch of a built-in kind applied with Kubernetes' patch strategies
(strategic_merge.py; 415 for a custom resource); server-side apply with field managers and
conflicts (server_side_apply.py) and managedFields on every write (managed_fields.py); PUT
(replace.py); a stale resourceVersion a 409 Conflict; DELETE with propagation policies and the
garbage collector (garbage_collector.py); a Table with the CRD's printer columns for `kubectl
get` (printer_columns.py); and, on request, a refusal (403, 422, ...) of writes to one resource,
or a whole API group missing (404), as in a cluster without a CRD. kmock stores the objects and
merge-patches them: every write reaches it as a create's body or a merge patch (or a JSON patch
ending in the whole object) that makes what the API server would store."""

import asyncio
import copy
from typing import Any

import aiohttp.web
import jsonpatch
import kmock
from kmock._internal.dicts import patch_dict
from llm_operator.api.crd import build_crd

from tests.k8s_operator.admission import Admission
from tests.k8s_operator.emulated_resources import PRINTER_COLUMNS
from tests.k8s_operator.emulated_resources import RESOURCES as RESOURCES  # the fixtures' import
from tests.k8s_operator.field_errors import Invalid
from tests.k8s_operator.field_paths import schema_of
from tests.k8s_operator.garbage_collector import GarbageCollector, requested_policy
from tests.k8s_operator.managed_fields import Scope, manager_from, record_update
from tests.k8s_operator.printer_columns import table, wants_table
from tests.k8s_operator.replace import replaced
from tests.k8s_operator.scale_subresource import scale_of
from tests.k8s_operator.server_side_apply import APPLY, ApplyError, apply, configuration
from tests.k8s_operator.strategic_merge import PatchError, is_built_in, strategic_merge
from tests.k8s_operator.validation import KUBERNETES_VERSION
from tests.k8s_operator.write_results import (
    conflict,
    content_type,
    name_mismatch,
    next_version,
    not_found,
    parse_selector,
    rewrite,
    set_fields,
    stamp_new,
    stamp_update,
)
from tests.k8s_operator.write_results import (
    merge_patch_between as merge_patch_between,
)

STRATEGIC = "application/strategic-merge-patch+json"
UNSUPPORTED_SMP = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
WRITES = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)
ADMISSIONS: dict[str, Admission] = {"pagedock.dev/v1alpha1/llmdeployments": Admission(build_crd())}


class Emulator(kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.refusals: dict[tuple[kmock.action, str], kmock.KubernetesError] = {}
        self.missing_groups: set[str] = set()
        self.admissions: dict[str, Admission] = dict(ADMISSIONS)
        """The custom resources whose writes go through admission, by resource."""
        self.garbage_collector = GarbageCollector(self)

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
        if request.resource is not None:
            await self._prepare(request)
        response = await super()._handle(request)
        if request.resource is not None and request.action in WRITES:
            self.garbage_collector.wake()
        return response

    async def _prepare(self, request: Any) -> None:
        """Turn a write into what kmock stores (a create's body, a merge patch that makes the
        new object of the stored one), as the API server would store it; mark a DELETE's object
        as its propagation policy says."""
        method = str(getattr(request.method, "value", request.method))
        if method == "PUT" and request.name is not None:
            self._as_replace(request)
        elif request.action == kmock.action.UPDATE and content_type(request) == APPLY:
            self._as_apply(request)
        elif request.action == kmock.action.UPDATE and request.data is not None:
            self._as_merge_patch(request, request.data)
        if request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            self._finish_write(request)
        elif request.action == kmock.action.DELETE and request.name is not None:
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key in self._objects and not self._objects[key].deleted:
                    policy = requested_policy(request)
                    if policy != "Background":
                        await self.garbage_collector.delete(key, policy)

    def _stored(self, request: Any) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return None  # kmock answers 404
        return self.objects[key].raw

    def _status_apart(self, request: Any) -> bool:
        try:
            return "status" in self.resources[request.resource].subresources
        except KeyError:
            return False

    def _schema(self, request: Any, obj: dict[str, Any]) -> dict[str, Any]:
        admission = next((a for r, a in self.admissions.items() if request.resource == r), None)
        return schema_of(obj, None if admission is None else admission.schema)

    def _scope(self, request: Any) -> Scope:
        return Scope(request.subresource or "", self._status_apart(request))

    def _as_replace(self, request: Any) -> None:
        """A PUT: the merge patch from the stored object to the replacement (replace.py)."""
        old = self._stored(request)
        if old is None:
            raise kmock.KubernetesError(404, "NotFound", not_found(request), {})
        custom = not is_built_in(old.get("apiVersion", ""), old.get("kind", ""))
        new = replaced(old, request.data, request, self._status_apart(request), custom)
        set_fields(request, action=kmock.action.UPDATE, data=merge_patch_between(old, new))

    def _as_apply(self, request: Any) -> None:
        """A server-side apply (server_side_apply.py): the merge patch to the applied object,
        or the create of it when there is none."""
        old = self._stored(request)
        try:
            config = configuration(request.data, request.text)
            name = config.setdefault("metadata", {}).setdefault("name", request.name)
            if name != request.name:
                raise ApplyError(400, "BadRequest", name_mismatch(name, request.name), {})
            if old is not None:
                self._check_version(request, old, config)
            manager, force = request.params.get("fieldManager", ""), request.params.get("force")
            new = apply(
                old,
                config,
                manager,
                self._scope(request),
                self._schema(request, config),
                force in ("true", "1"),
            )
        except ApplyError as error:
            raise kmock.KubernetesError(*error.status_args) from None
        if old is None:
            if request.namespace is not None:
                new["metadata"]["namespace"] = request.namespace
            set_fields(request, action=kmock.action.CREATE, data=new)
        else:
            set_fields(request, data=merge_patch_between(old, new))

    def _check_version(self, request: Any, old: dict[str, Any], body: Any) -> None:
        """A write's resourceVersion precondition: 409 when stale."""
        wanted = ((body if isinstance(body, dict) else {}).get("metadata") or {}).get(
            "resourceVersion"
        )
        if wanted is not None and wanted != old.get("metadata", {}).get("resourceVersion"):
            raise kmock.KubernetesError(409, "Conflict", conflict(request), {})

    def _as_merge_patch(self, request: Any, data: Any) -> None:
        """Check a patch's resourceVersion precondition (409 when stale), and turn a strategic
        merge patch of a built-in kind into the JSON merge patch with the same result, which
        kmock applies (415 for a custom resource, as the API server answers)."""
        old = self._stored(request)
        if old is None:
            return
        self._check_version(request, old, data)
        if content_type(request) != STRATEGIC or request.subresource == "scale":
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

    def _finish_write(self, request: Any) -> None:
        """The stored result of a create or an update: server-set metadata (new
        resourceVersion, generation on a change beyond metadata and status), admission for
        the custom resources that have it (admission.py: a 422 stores nothing) and
        managedFields; the request's body becomes what makes it."""
        old = None if request.action == kmock.action.CREATE else self._stored(request)
        if request.data is None or (old is None and request.action != kmock.action.CREATE):
            return
        try:
            obj = (
                copy.deepcopy(request.data) if old is None else dict(patch_dict(old, request.data))
            )
        except jsonpatch.JsonPatchException as error:
            raise kmock.KubernetesError(422, "Invalid", str(error), {}) from None
        if old is None:
            stamp_new(obj)
        else:
            stamp_update(old, obj, bump=request.subresource != "status")
        obj = self._admit(request, old, obj)
        if content_type(request) != APPLY:
            manager = manager_from(request.params, request.headers)
            record_update(old, obj, manager, self._scope(request), self._schema(request, obj))
        rewrite(request.data, old, obj)

    def _admit(
        self, request: Any, old: dict[str, Any] | None, obj: dict[str, Any]
    ) -> dict[str, Any]:
        """The object as admission stores it (pruned and defaulted), or the API server's 422.
        A status write skips the CEL rules (they are all on spec)."""
        admission = next((a for r, a in self.admissions.items() if request.resource == r), None)
        if admission is None:
            return obj
        try:
            return admission.admit(obj, old, rules=request.subresource != "status")
        except Invalid as error:
            status = (error.status, error.reason, error.message, error.details)
            raise kmock.KubernetesError(*status) from None

    @property
    def store_lock(self) -> asyncio.Lock:
        """kmock's lock over its objects (the garbage collector writes under it)."""
        lock: asyncio.Lock = self._lock
        return lock

    async def publish_patched(self, key: Any, changes: dict[str, Any]) -> None:
        """Merge-patch a stored object with a new resourceVersion; watchers see MODIFIED."""
        obj = self._objects[key]
        obj.patch(patch_dict(changes, {"metadata": {"resourceVersion": next_version()}}))
        await self._buses[key[0]].put({"type": "MODIFIED", "object": obj.raw})

    async def publish_deleted(self, key: Any) -> None:
        obj = self._objects[key]
        raw = obj.raw
        obj.delete()
        await self._buses[key[0]].put({"type": "DELETED", "object": raw})

    async def _serve_list(self, request: Any) -> Any:
        listing: dict[str, Any] = await super()._serve_list(request)  # type: ignore[assignment]
        selector = request.params.get("labelSelector", "")
        named = field_selected_name(request.params.get("fieldSelector", ""))
        listing["items"] = [
            item
            for item in listing["items"]
            if self.selected(item, selector) and named in (None, item["metadata"].get("name"))
        ]
        columns = next((c for r, c in PRINTER_COLUMNS.items() if request.resource == r), None)
        if columns and wants_table(request):
            return table(listing["items"], columns, next_version())
        # As the API server lists: a typed list at a resource version of now (kmock leaves out
        # the kind, which client-go's informers need, and gives "..." as the version).
        info = next((i for r, i in self.resources.items() if request.resource == r), None)
        kind = info.get("kind") if isinstance(info, dict) else getattr(info, "kind", None)
        resource = request.resource
        group_version = f"{resource.group}/{resource.version}" if resource.group else "v1"
        return {
            "apiVersion": group_version,
            "kind": f"{kind}List" if kind else "List",
            "metadata": {"resourceVersion": next_version()},
            "items": listing["items"],
        }

    async def _serve_fetch(self, request: Any) -> Any:
        return self._shown(request, await super()._serve_fetch(request))

    async def _serve_update(self, request: Any) -> Any:
        return self._shown(request, await super()._serve_update(request))

    def _shown(self, request: Any, found: Any) -> Any:
        """An object as a Table (kubectl get) or as its Scale (the scale subresource)."""
        if request.subresource == "scale":
            return scale_of(found)
        columns = next((c for r, c in PRINTER_COLUMNS.items() if request.resource == r), None)
        if columns and wants_table(request):
            return table([found], columns, found["metadata"].get("resourceVersion", ""))
        return found

    async def _serve_server_version(self, request: Any) -> Any:
        """`/version`: the Kubernetes release whose OpenAPI the emulator applies (the chart's
        `kubeVersion` is checked against it by Helm)."""
        version: dict[str, Any] = await super()._serve_server_version(request)  # type: ignore[assignment]
        major, minor = KUBERNETES_VERSION.split(".")[:2]
        git_version = f"v{KUBERNETES_VERSION}" + (
            ".0" if KUBERNETES_VERSION.count(".") == 1 else ""
        )
        return {**version, "major": major, "minor": minor, "gitVersion": git_version}

    async def _serve_version(self, request: Any) -> Any:
        """Discovery as the API server words it: the core group's version is `v1` (not `/v1`:
        Helm's REST mapper finds no core kind then), a singular name is the kind's in lower
        case, and a subresource has no short names or categories of its own."""
        listed: dict[str, Any] = await super()._serve_version(request)  # type: ignore[assignment]
        listed["groupVersion"] = listed.get("groupVersion", "").lstrip("/")
        for resource in listed.get("resources", []):
            if "/" in resource["name"]:
                resource["shortNames"], resource["categories"] = [], []
            elif resource["singularName"] == resource["name"]:
                resource["singularName"] = resource["kind"].lower()
        return listed

    def selected(self, item: dict[str, Any], selector: str) -> bool:
        """Whether a listed object matches the label selector (equality terms)."""
        wanted = parse_selector(selector)
        return wanted.items() <= (item.get("metadata", {}).get("labels") or {}).items()


def field_selected_name(selector: str) -> str | None:
    """The name a `fieldSelector` of `metadata.name=NAME` asks for (kubectl wait's and get's
    selector; other field selectors are not applied)."""
    for term in filter(None, selector.split(",")):
        field, _, value = term.partition("=")
        if field.strip() == "metadata.name":
            return value.strip().lstrip("=")
    return None
