"""kopf handlers, kept thin: each one finds the LLMDeployment concerned and calls the Reconciler.

Triggers (level-based; any of them leads to the same full reconcile):
  create / update / resume of an LLMDeployment   the spec changed or the operator restarted
  a pass every `resync_seconds` (resync.py)      drift repair, metrics into status
  the built-in autoscaler (autoscaler/loop.py)  writes spec.replicas, which is an update (its
                                               windows go to a ConfigMap no handler watches)
  an event on a child Deployment, Service,     a child became ready, failed, was edited or
  Pod or Job                                   deleted, or a model download finished
No handler needs a finalizer, so deletion never waits for the operator: the garbage collector
deletes the children through their owner references. kopf removes the finalizer that older
versions put on objects (`pagedock.dev/finalizer`) when it first sees them.
Child watches are filtered by label on the API server (`settings.watching.label_selectors`).
A registry is built per run (not at import) so tests can start several operators in one process.
The reconciler and the autoscaler update one OperatorMetrics, served on `metrics_port`
(metrics_server.py).
"""

import asyncio
import contextlib
import logging
import os
from typing import Any

import kopf

from llm_operator import GROUP, PLURAL, VERSION
from llm_operator.autoscaler.loop import Autoscaler
from llm_operator.autoscaler.rule import SCALING_REASONS
from llm_operator.controller.metrics_server import MetricsServer
from llm_operator.controller.reconcile import Reconciler
from llm_operator.controller.resync import resync_forever
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.leadership import Peering
from llm_operator.k8s.resources import LLM_DEPLOYMENT
from llm_operator.names import MANAGED_BY, OWNER_LABEL
from llm_operator.operator_metrics import OperatorMetrics
from llm_operator.settings import OperatorSettings

PREFIX = "pagedock.dev"
CHILD_LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}
CHILD_SELECTOR = ",".join(f"{key}={value}" for key, value in CHILD_LABELS.items())
FLUSH_TIMEOUT_S = 5.0  # stopping: the autoscaler's last record of its windows
PEER_IDENTITY = "peer_identity"  # set in the memo by `pagedock operator run`, also given to kopf
# Engine pods too: their failures (image pulls, crash loops, scheduling) go into status.
WATCHED_CHILDREN = (
    ("apps", "v1", "deployments"),
    ("", "v1", "services"),
    ("", "v1", "pods"),
    ("batch", "v1", "jobs"),  # a model download finished: start the engines
)


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then the official client (exec plugins), then
    kubeconfig."""
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
    # NOTE: no handler needs a finalizer; kopf strips this one, left by older versions.
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
    # NOTE: `labels=` on a handler filters in the operator, after the whole cluster's objects
    # arrived; a label selector makes the API server send only our children.
    for child in WATCHED_CHILDREN:
        settings.watching.label_selectors[child] = CHILD_SELECTOR


def make_registry(operator: OperatorSettings) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    resource = (GROUP, VERSION, PLURAL)

    @kopf.on.startup(registry=registry)
    async def startup(
        settings: kopf.OperatorSettings,
        memo: kopf.Memo,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **_: Any,
    ) -> None:
        configure(settings, operator)
        kube = KubeClient(lambda: login(settings=settings, logger=logger))
        metrics = OperatorMetrics(SCALING_REASONS)
        memo["metrics_server"] = None
        if operator.metrics_port:
            server = MetricsServer(metrics)
            memo["metrics_server"] = server if await server.start(operator.metrics_port) else None
        memo["reconciler"] = reconciler = Reconciler(kube, operator, metrics=metrics)
        peering = None
        if not settings.peering.standalone and PEER_IDENTITY in memo:
            peering = Peering(settings.peering.name, memo[PEER_IDENTITY], settings.peering.priority)
        resync = resync_forever(reconciler, operator.namespaces, peering)
        memo["resync"] = asyncio.create_task(resync)
        memo["scaler"] = autoscaler = Autoscaler(kube, operator, reconciler.lock, metrics)
        memo["autoscaler"] = asyncio.create_task(autoscaler.run_forever(peering))

    kopf.on.cleanup(registry=registry)(cleanup)
    kopf.on.login(registry=registry)(login)

    @kopf.on.resume(*resource, registry=registry)
    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    async def changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        try:
            await memo["reconciler"].reconcile(body)
        except KubeError as error:  # API hiccups, conflicts, webhooks: retry soon, not in 60 s
            raise kopf.TemporaryError(str(error), delay=5) from error

    @kopf.on.event(*resource, registry=registry)
    async def gone(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        if event["type"] == "DELETED":
            memo["reconciler"].forget(body["metadata"]["namespace"], body["metadata"]["name"])

    for group, version, plural in WATCHED_CHILDREN:
        kopf.on.event(group, version, plural, labels=CHILD_LABELS, registry=registry)(child_event)
    return registry


async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """The operator stops: the background tasks end, the autoscaler records its windows."""
    for task in (memo["resync"], memo["autoscaler"]):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # The windows since the last periodic write: the next leader resumes from them.
    try:
        await asyncio.wait_for(memo["scaler"].flush(), FLUSH_TIMEOUT_S)
    except TimeoutError:
        logging.getLogger(__name__).warning("the autoscaler windows were not all saved")
    await memo["reconciler"].kube.close()
    if memo["metrics_server"] is not None:
        await memo["metrics_server"].stop()


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
