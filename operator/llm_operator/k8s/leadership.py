"""Whether this operator replica is kopf's active peer, for the work kopf does not gate itself.

kopf pauses a replica's handlers while its peering object lists a live peer with a higher
priority (kopf's rule; equal priorities both run, with a warning). The resync pass is no kopf
handler (resync.py says why), so it reads the same object and applies the same rule: only the
active replica resyncs. `pagedock operator run` chooses the identity and hands it to kopf.
"""

import dataclasses
import datetime
import logging
from typing import Any

from llm_operator.k8s.kube import KubeClient, KubeError

logger = logging.getLogger(__name__)
DEFAULT_PEER_LIFETIME_SECONDS = 60  # kopf's, for peers that do not say


@dataclasses.dataclass(frozen=True)
class Peering:
    name: str
    identity: str
    priority: int

    def path(self, namespace: str | None) -> str:
        """The ClusterKopfPeering (cluster-wide operator) or the namespace's KopfPeering."""
        if namespace is None:
            return f"/apis/kopf.dev/v1/clusterkopfpeerings/{self.name}"
        return f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings/{self.name}"


def outranked(peering: Peering, peers: dict[str, Any], now: datetime.datetime) -> bool:
    """Some other live peer has a higher priority (`peers` is the peering object's status)."""
    for identity, info in peers.items():
        if identity == peering.identity or not isinstance(info, dict):
            continue
        lifetime = datetime.timedelta(
            seconds=int(info.get("lifetime", DEFAULT_PEER_LIFETIME_SECONDS))
        )
        lastseen = info.get("lastseen")
        if lastseen and datetime.datetime.fromisoformat(lastseen) + lifetime <= now:
            continue  # dead: kopf ignores it too
        if int(info.get("priority", 0)) > peering.priority:
            return True
    return False


async def is_active(kube: KubeClient, peering: Peering | None, namespace: str | None) -> bool:
    """True when standalone, or no live peer outranks this replica; True also when the peering
    object cannot be read (kopf's own handlers then decide alone, as before)."""
    if peering is None:
        return True
    try:
        body = await kube.get(peering.path(namespace))
    except KubeError as error:
        logger.warning("cannot read the peering object %s: %s", peering.path(namespace), error)
        return True
    now = datetime.datetime.now(datetime.UTC)
    return body is None or not outranked(peering, body.get("status") or {}, now)
