"""status.startup: how the latest revision's newest ready engine pod started, stage by stage.

Each engine serves GET /startup (engine/startup_stages.py): the seconds from its process's start
to each stage it reached. The pod read is the newest ready engine pod of the newest revision
(the `pod-template-hash` of the most recently created engine pod), so a rollout or a scale-up
shows its new pods' cold start once one of them is ready:

    startup:
      pod: smollm2-engine-5d8f7-x2kq9
      revision: 5d8f7c9b4
      processStartTime: "2026-12-02T12:00:01Z"
      stages: {importsDone: 2.1, weightsLocated: 2.2, kernelsReady: 2.9, weightsLoaded: 4.0,
               warmupDone: 4.6, ready: 4.7, firstRequestServed: 9.3}

A pod's figures are read again on each pass until its first request was served (the last stage),
then kept. While no such pod is ready (scaled to zero, a rollout's first pod still loading) the
status keeps the figures it has; an engine that cannot be reached is skipped the same way.
"""

import dataclasses
import datetime
from typing import Any

from llm_operator.fleet.engine_json import finite_seconds, get_engine_json
from llm_operator.fleet.status import deployment_counts
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import POD
from llm_operator.names import ENGINE_PORT, selector_labels, selector_string
from llm_operator.settings import OperatorSettings

Obj = dict[str, Any]
REVISION_LABEL = "pod-template-hash"
# The engine's stage names (engine/startup_stages.py) as status.startup.stages' fields;
# process_start is 0 by definition and is given as processStartTime instead.
STAGE_FIELDS = {
    "imports_done": "importsDone",
    "weights_located": "weightsLocated",
    "kernels_ready": "kernelsReady",
    "weights_loaded": "weightsLoaded",
    "warmup_done": "warmupDone",
    "ready": "ready",
    "first_request_served": "firstRequestServed",
}
LAST_STAGE = "firstRequestServed"


def is_ready(pod: Obj) -> bool:
    """Passes its readiness probe, has an IP and is not going away."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return ready and bool(status.get("podIP")) and not pod["metadata"].get("deletionTimestamp")


def _age_key(pod: Obj) -> tuple[str, str]:
    meta = pod["metadata"]
    return meta.get("creationTimestamp") or "", meta["name"]


def latest_ready_pod(pods: list[Obj]) -> Obj | None:
    """The newest ready pod of the newest revision; None when none of that revision is ready."""
    live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
    if not live:
        return None
    revision = _revision(max(live, key=_age_key))
    ready = [pod for pod in live if is_ready(pod) and _revision(pod) == revision]
    return max(ready, key=_age_key) if ready else None


def _revision(pod: Obj) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)


def startup_status(pod: Obj, report: Obj) -> Obj | None:
    """status.startup from a pod and its GET /startup body; None for a body that is not one."""
    stages = report.get("stages")
    started = report.get("process_start_time")
    if not isinstance(stages, dict) or not isinstance(started, int | float):
        return None
    # NOTE: a stage not reached is null, not left out: status is merge-patched, and an older
    # pod's figure for it must not survive into this pod's.
    fields = {name: finite_seconds(stages.get(stage)) for stage, name in STAGE_FIELDS.items()}
    when = datetime.datetime.fromtimestamp(float(started), datetime.UTC)
    return {
        "pod": pod["metadata"]["name"],
        "revision": _revision(pod),
        "processStartTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "stages": fields,
    }


@dataclasses.dataclass
class EngineStartups:
    """Reads status.startup for the reconciler, once per pass of an LLMDeployment, with the
    metrics (`scrape_metrics`, `scrape_timeout_seconds`)."""

    kube: KubeClient
    settings: OperatorSettings
    port: int = ENGINE_PORT
    _complete: dict[tuple[str, str], tuple[str, Obj]] = dataclasses.field(default_factory=dict)
    """(namespace, name) -> (pod uid, its status.startup) once the last stage is in it (nothing
    changes after that)."""

    def forget(self, namespace: str, name: str) -> None:
        self._complete.pop((namespace, name), None)

    async def read(self, namespace: str, name: str, engine: Obj | None) -> Obj | None:
        """status.startup now, given the live engine Deployment; None: leave what the status
        has (no engine ready, or the engines' metrics are not read)."""
        if not self.settings.scrape_metrics or deployment_counts(engine)[2] == 0:
            return None
        selector = selector_string(selector_labels(name, "engine"))
        try:
            pods = await self.kube.list(POD.collection_path(namespace), selector)
        except KubeError:  # no RBAC for pods yet, an API hiccup: the next pass reads it
            return None
        pod = latest_ready_pod(pods)
        if pod is None:
            return None
        uid = pod["metadata"]["uid"]
        complete = self._complete.get((namespace, name))
        if complete is not None and complete[0] == uid:
            return complete[1]
        report = await self._fetch(pod["status"]["podIP"])
        status = None if report is None else startup_status(pod, report)
        if status is not None and status["stages"][LAST_STAGE] is not None:
            self._complete[namespace, name] = (uid, status)
        return status

    async def _fetch(self, ip: str) -> Obj | None:
        timeout = self.settings.scrape_timeout_seconds
        return await get_engine_json(ip, self.port, "/startup", timeout)
