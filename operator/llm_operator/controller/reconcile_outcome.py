"""How a reconcile pass ended, for the operator's metrics: applied, applied in part (the Ready
reason status gives), failed (an exception, named by where it came from), or nothing to do."""

import dataclasses

import aiohttp

from llm_operator.fleet.gateway_status import GATEWAY_CRD_MISSING
from llm_operator.fleet.status import CHILD_REJECTED
from llm_operator.k8s.kube import KubeError

GONE = "Gone"  # the object was deleted before the pass began: nothing reconciled, nothing counted


@dataclasses.dataclass
class ApplyIssues:
    """What stopped children from being applied in one pass (the rest were applied)."""

    refusals: list[str] = dataclasses.field(default_factory=list)
    """`<kind> <name>: <server message>` of each child the API server refused."""
    missing_crds: list[str] = dataclasses.field(default_factory=list)
    """CRDs (e.g. inferencepools.inference.networking.k8s.io) that optional children need."""

    def reason(self) -> str | None:
        """Why only part was applied, as the Ready condition says it; None when all was."""
        if self.refusals:
            return CHILD_REJECTED
        return GATEWAY_CRD_MISSING if self.missing_crds else None


def error_reason(error: Exception) -> str:
    """A failed pass's reason, as one word for a metric label."""
    if isinstance(error, KubeError):
        return "APIError"  # refused, conflicted or failed on the API server's side
    if isinstance(error, (aiohttp.ClientError, OSError, TimeoutError)):
        return "APIUnreachable"
    return "InternalError"
