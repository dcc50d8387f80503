"""kopf handlers, kept thin: each one finds the LLMDeployment concerned and calls the Reconciler.

Triggers (level-based; any of them leads to the same full reconcile):
  create / update / resume of an LLMDeployment   the spec changed or the operator restarted
  a timer every `resync_seconds`                 drift repair, metrics into status
  an event on a child Deployment, Service, Job   a child became ready, was edited or deleted
A registry is built per run (not at import) so tests can start several operators in one process.
"""

import logging
import os
from typing import Any

import kopf

from llm_operator import GROUP, PLURAL, VERSION
from llm_operator.kube import KubeClient, KubeError
from llm_operator.metrics import scrape_fleet
from llm_operator.names import MANAGED_BY, OWNER_LABEL, engine_name
from llm_operator.reconcile import Reconciler
from llm_operator.resources import LLM_DEPLOYMENT
from llm_operator.settings import OperatorSettings

PREFIX = "pagedock.dev"
CHILD_LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}
WATCHED_CHILDREN = (
    ("apps", "v1", "deployments"),
    ("", "v1", "services"),
    ("batch", "v1", "jobs"),  # a model download finished: start the engines
)


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then the official client (exec plugins), then kubeconfig."""
    info = kopf.login_with_service_account(**kwargs)
    if info is not None:
        return info
    try:
        from kubernetes.config import kube_config
    except ImportError:
        return kopf.login_with_kubeconfig(**kwargs)
    # The client reads KUBECONFIG once, when it is imported; kubectl reads it on every call, and so
    # must we (tests and wrappers set it after the import).
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ.get("KUBECONFIG", "~/.kube/config")
    return kopf.login_via_client(**kwargs)


def configure(settings: kopf.OperatorSettings, operator: OperatorSettings) -> None:
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.execution.max_workers = 4
    settings.watching.server_timeout = 300
    settings.peering.name = operator.peering_name or "pagedock"
    # Our resources are known up front: no CRD/namespace scanning, so no RBAC for it either.
    settings.scanning.disabled = True


def make_registry(operator: OperatorSettings) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    resource = (GROUP, VERSION, PLURAL)

    @kopf.on.startup(registry=registry)
    def startup(
        settings: kopf.OperatorSettings,
        memo: kopf.Memo,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **_: Any,
    ) -> None:
        configure(settings, operator)
        kube = KubeClient(lambda: login(settings=settings, logger=logger))
        memo["reconciler"] = Reconciler(kube, operator)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        await memo["reconciler"].kube.close()

    kopf.on.login(registry=registry)(login)

    @kopf.on.resume(*resource, registry=registry)
    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    async def changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        try:
            await memo["reconciler"].reconcile(body)
        except KubeError as error:  # API hiccups, conflicts, webhooks: retry soon, not in 60 s
            raise kopf.TemporaryError(str(error), delay=5) from error

    @kopf.timer(*resource, interval=operator.resync_seconds, idle=None, registry=registry)
    async def resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        if body["metadata"].get("deletionTimestamp"):
            return
        stats = None
        if operator.scrape_metrics:
            host = f"{engine_name(body['metadata']['name'])}.{body['metadata']['namespace']}.svc"
            stats = await scrape_fleet(host, operator.scrape_timeout_seconds)
        await memo["reconciler"].reconcile(body, stats)

    @kopf.on.delete(*resource, registry=registry)
    async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        reconciler: Reconciler = memo["reconciler"]
        await reconciler.delete_children(body)
        reconciler.forget(body["metadata"]["namespace"], body["metadata"]["name"])

    for group, version, plural in WATCHED_CHILDREN:
        kopf.on.event(group, version, plural, labels=CHILD_LABELS, registry=registry)(child_event)
    return registry


async def child_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A child changed or vanished: reconcile its owner (coalescing bursts of events)."""
    name = body.get("metadata", {}).get("labels", {}).get(OWNER_LABEL)
    namespace = body.get("metadata", {}).get("namespace")
    if not name or not namespace:
        return
    reconciler: Reconciler = memo["reconciler"]
    if reconciler.lock(namespace, name).locked():
        return  # a reconcile is running; it, or the next event or timer, sees this change
    owner = await reconciler.kube.get(LLM_DEPLOYMENT.object_path(namespace, name))
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return
    await reconciler.reconcile(owner)
