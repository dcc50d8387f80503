"""The drift-repair pass: every `resync_seconds` each LLMDeployment is reconciled again (and its
engines' metrics read into status), from one operator-wide task.

NOTE: not a kopf timer. kopf puts a finalizer on every object that has a timer (it must stop the
timer before the object goes), and a finalizer makes deletion wait for the operator: with the
operator gone, an LLMDeployment or its namespace would never finish deleting. Owner references
already let the garbage collector delete the children, so the operator needs no finalizer.
Of several operator replicas, only kopf's active peer runs it (leadership.py).
"""

import asyncio
import logging
from typing import Any

from llm_operator import API_VERSION, KIND
from llm_operator.controller.reconcile import Reconciler
from llm_operator.fleet.metrics import scrape_fleet
from llm_operator.k8s.kube import KubeError
from llm_operator.k8s.leadership import Peering, is_active
from llm_operator.k8s.resources import collection_paths
from llm_operator.names import engine_name

logger = logging.getLogger(__name__)


async def resync_forever(
    reconciler: Reconciler, namespaces: tuple[str, ...], peering: Peering | None
) -> None:
    while True:
        await asyncio.sleep(reconciler.settings.resync_seconds)
        await resync_once(reconciler, namespaces, peering)


async def resync_once(
    reconciler: Reconciler, namespaces: tuple[str, ...], peering: Peering | None = None
) -> None:
    for namespace, path in collection_paths(namespaces):
        if not await is_active(reconciler.kube, peering, namespace):
            continue  # another replica leads here
        try:
            listing = await reconciler.kube.get(path)
        except KubeError as error:
            logger.warning("resync: cannot list %s: %s", path, error)
            continue
        for body in (listing or {}).get("items", []):
            # NOTE: a list's items may omit apiVersion/kind; owner references need both.
            body.setdefault("apiVersion", API_VERSION)
            body.setdefault("kind", KIND)
            await resync_one(reconciler, body)


async def resync_one(reconciler: Reconciler, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp") or reconciler.lock(meta["namespace"], meta["name"]).locked():
        return  # going away, or a reconcile is running that sees the same state
    settings = reconciler.settings
    stats = None
    if settings.scrape_metrics:
        host = f"{engine_name(meta['name'])}.{meta['namespace']}.svc"
        stats = await scrape_fleet(host, settings.scrape_timeout_seconds)
    try:
        await reconciler.reconcile(body, stats)
    except Exception:  # one broken object must not stop the pass over the others
        logger.exception("resync of %s/%s failed", meta["namespace"], meta["name"])
