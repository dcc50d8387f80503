"""Events from the autoscaler's own task. kopf.event posts only from inside a handler (its queue
lives in the handler's context), so the autoscaler writes its core/v1 Events itself: `kubectl
describe llmd` shows each scale decision and why."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any

from llm_operator.conditions import now_rfc3339
from llm_operator.k8s.kube import KubeClient, KubeError

logger = logging.getLogger(__name__)
COMPONENT = "pagedock-operator"


def build_event(
    body: Mapping[str, Any], reason: str, message: str, type_: str = "Normal"
) -> dict[str, Any]:
    meta = body["metadata"]
    now = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{secrets.token_hex(8)}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": COMPONENT},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def post_event(
    kube: KubeClient, body: Mapping[str, Any], reason: str, message: str, type_: str = "Normal"
) -> None:
    event = build_event(body, reason, message, type_)
    try:
        await kube.create(f"/api/v1/namespaces/{body['metadata']['namespace']}/events", event)
    except KubeError as error:  # an Event is a courtesy: the decision stands without it
        logger.warning("cannot post the %s event: %s", reason, error)
