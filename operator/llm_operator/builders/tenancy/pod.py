"""How the pods that read the tenants get them: one projected volume (the ConfigMap's file and
the tenants' keys from their Secrets), the flags, and a hash of both in the pod template."""

import hashlib
import json

from llm_operator.builders.common import Obj
from llm_operator.builders.context import BuildContext
from llm_operator.builders.tenancy.config_map import (
    TENANTS_DIR,
    TENANTS_FILE,
    build_tenants_config_map,
    secret_sources,
)
from llm_operator.names import TENANTS_HASH_ANNOTATION, tenants_name

VOLUME = "tenants"
# NOTE: group-readable: the files belong to root and the pod's fsGroup, the containers run as
# that group (builders/common.py, pod_security_context).
FILE_MODE = 0o440


def reads_tenants(ctx: BuildContext, component: str) -> bool:
    """Whether this component's pods read the tenants: the router's, or the engines' without one."""
    if ctx.spec.tenancy is None:
        return False
    return component == ("router" if ctx.spec.router.enabled else "engine")


def tenants_volumes(ctx: BuildContext, component: str) -> list[Obj]:
    if ctx.spec.tenancy is None or not reads_tenants(ctx, component):
        return []
    config = {
        "configMap": {
            "name": tenants_name(ctx.name),
            "items": [{"key": TENANTS_FILE, "path": TENANTS_FILE}],
        }
    }
    sources = [config, *secret_sources(ctx.spec.tenancy)]
    return [{"name": VOLUME, "projected": {"defaultMode": FILE_MODE, "sources": sources}}]


def tenants_mounts(ctx: BuildContext, component: str) -> list[Obj]:
    if not reads_tenants(ctx, component):
        return []
    return [{"name": VOLUME, "mountPath": TENANTS_DIR, "readOnly": True}]


def tenants_args(ctx: BuildContext, component: str) -> list[str]:
    """`--tenants FILE --fairness X [--tenant-header H]`: the router's and the engine's flags
    have the same names."""
    tenancy = ctx.spec.tenancy
    if tenancy is None or not reads_tenants(ctx, component):
        return []
    args = ["--tenants", f"{TENANTS_DIR}/{TENANTS_FILE}", "--fairness", tenancy.fairness]
    if tenancy.tenant_header is not None:
        args += ["--tenant-header", tenancy.tenant_header]
    return args


def quota_store_env(ctx: BuildContext, component: str) -> list[Obj]:
    """With tenancy.quotaStore redis, the pods that count quotas (those that read the tenants)
    get the Redis URL from its Secret as `PAGEDOCK_QUOTA_STORE` (`--quota-store`): a password in
    it reaches neither the pod template nor a command line."""
    tenancy = ctx.spec.tenancy
    if tenancy is None or not reads_tenants(ctx, component):
        return []
    secret = tenancy.quota_redis_url_secret
    if tenancy.quota_store != "redis" or secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": "PAGEDOCK_QUOTA_STORE", "valueFrom": ref}]


def engine_tenancy_args(ctx: BuildContext) -> list[str]:
    """With tenants, engines order their waiting requests as the router does: by priority (the
    router forwards each request's, bounded by its tenant's), then fairly between the tenants
    (the router names each request's); without a router they read the tenants themselves."""
    tenancy = ctx.spec.tenancy
    if tenancy is None:
        return []
    if reads_tenants(ctx, "engine"):
        return ["--scheduling-policy", "priority", *tenants_args(ctx, "engine")]
    return ["--scheduling-policy", "priority", "--fairness", tenancy.fairness]


def tenants_annotations(ctx: BuildContext, component: str) -> dict[str, str]:
    """The pod template's hash of the tenants file and the Secrets' names and keys: the readers
    load both once, at start, so a change must roll them. (A Secret's new value under the same
    name and key rolls nothing: `kubectl rollout restart` the readers after rotating a key.)"""
    if ctx.spec.tenancy is None or not reads_tenants(ctx, component):
        return {}
    content = {
        "data": build_tenants_config_map(ctx)["data"],
        "secrets": secret_sources(ctx.spec.tenancy),
    }
    text = json.dumps(content, sort_keys=True).encode()
    return {TENANTS_HASH_ANNOTATION: hashlib.sha256(text).hexdigest()[:16]}
