"""Why engine pods do not come up: the pod-level cause, read from pod status (pure functions).

The cause words are the kubelet's and the scheduler's own (`kubectl get pods` shows them), so a
condition reason can be searched for as is:

  CreateContainerConfigError  a Secret, ConfigMap or key the pod refers to is missing
  CreateContainerError        the runtime could not create the container
  InvalidImageName            the image reference does not parse
  ErrImagePull                the last pull failed (the message is the registry's error)
  ImagePullBackOff            the kubelet waits before pulling again
  RunContainerError           the runtime could not start the container
  CrashLoopBackOff            the container keeps exiting: in back-off, or restarting after a crash
                              and not started since; the message names the last termination
  OOMKilled                   the same, when the last run was killed for memory and the container
                              is not in back-off (in back-off it is CrashLoopBackOff's message)
  Unschedulable               no node fits (PodScheduled=False: "Insufficient nvidia.com/gpu")
"""

import logging
from typing import Any, NamedTuple

from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import POD
from llm_operator.names import selector_labels, selector_string

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

# NOTE: most severe first. What no retry fixes (configuration, image) comes before what may heal
# (a crash loop, a pod waiting for a node). ErrImagePull ranks above ImagePullBackOff because it
# carries the registry's error, where the back-off only says "Back-off pulling image".
SEVERITY = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "ErrImagePull",
    "ImagePullBackOff",
    "RunContainerError",
    "CrashLoopBackOff",
    "OOMKilled",
    "Unschedulable",
)
WAITING_FAILURES = frozenset(SEVERITY) - {"OOMKilled", "Unschedulable"}
# The kubelet alternates these for one cause (pull, back-off, pull; run, crash, back-off).
SAME_CAUSE = {"ErrImagePull": "ImagePullBackOff", "OOMKilled": "CrashLoopBackOff"}
MAX_TERMINATION_MESSAGE_CHARS = 200


class PodFailure(NamedTuple):
    reason: str
    """The cause word, one of SEVERITY."""
    message: str
    """`pod <name>: <the kubelet's or the scheduler's message>`."""


def engine_failure(pods: list[Obj]) -> PodFailure | None:
    """The most severe failure among the pods; on a tie the first pod by name, so the condition
    does not flip between pods that fail the same way from one resync to the next."""
    failures = [failure for pod in pods if (failure := pod_failure(pod)) is not None]
    if not failures:
        return None
    return min(failures, key=lambda failure: (SEVERITY.index(failure.reason), failure.message))


def pod_failure(pod: Obj) -> PodFailure | None:
    """Why this pod is not ready, or None when it is ready, being deleted, or merely starting."""
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or _is_ready(status):
        return None
    containers = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    causes = [cause for item in containers if (cause := container_failure(item)) is not None]
    if (unschedulable := scheduling_failure(status)) is not None:
        causes.append(unschedulable)
    if not causes:
        return None
    reason, message = min(causes, key=lambda cause: SEVERITY.index(cause[0]))
    name = (pod.get("metadata") or {}).get("name", "?")
    return PodFailure(reason, f"pod {name}: {message}")


def container_failure(container_status: Obj) -> tuple[str, str] | None:
    """(reason, message) from one entry of status.containerStatuses, or None."""
    waiting = (container_status.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason", "")
    if reason == "CrashLoopBackOff":
        message = waiting.get("message") or "back-off restarting failed container"
        last = (container_status.get("lastState") or {}).get("terminated")
        if last:
            message += f"; last terminated: {describe_termination(last)}"
        return reason, message
    if reason in WAITING_FAILURES:
        return reason, waiting.get("message") or reason
    # NOTE: between two back-offs the container runs again; until it passes its startup probe
    # (`started`) the crash is still the news, so the condition does not flip to "loading".
    crash = _crash(container_status)
    if crash is None or container_status.get("started"):
        return None
    if crash.get("reason") == "OOMKilled":
        return "OOMKilled", f"last terminated: {describe_termination(crash)}"
    return (
        "CrashLoopBackOff",
        f"restarting after a crash; last terminated: {describe_termination(crash)}",
    )


def scheduling_failure(pod_status: Obj) -> tuple[str, str] | None:
    """(Unschedulable, the scheduler's message) from the PodScheduled condition, or None."""
    for item in pod_status.get("conditions", []):
        if (item.get("type"), item.get("status"), item.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return "Unschedulable", item.get("message") or "no node fits the pod"
    return None


def describe_termination(terminated: Obj) -> str:
    """`OOMKilled (exit code 137)`, plus the tail of the termination message when there is one."""
    text = f"{terminated.get('reason') or 'Error'} (exit code {terminated.get('exitCode', '?')})"
    message = (terminated.get("message") or "").strip()
    if message:
        text += f": {message[-MAX_TERMINATION_MESSAGE_CHARS:]}"
    return text


def _crash(container_status: Obj) -> Obj | None:
    """The latest termination (now, else the previous run) when it was a crash: killed for
    memory or a non-zero exit code."""
    for state in ("state", "lastState"):
        terminated = (container_status.get(state) or {}).get("terminated")
        if terminated:
            crashed = terminated.get("reason") == "OOMKilled" or terminated.get("exitCode", 0) != 0
            return terminated if crashed else None
    return None


def _is_ready(pod_status: Obj) -> bool:
    return any(
        item.get("type") == "Ready" and item.get("status") == "True"
        for item in pod_status.get("conditions", [])
    )


async def read_engine_failure(
    kube: KubeClient, namespace: str, name: str, counts: tuple[int, int, int]
) -> PodFailure | None:
    """Why the engine pods do not come up; the pods are read only while replicas are missing
    (`counts`: the engine Deployment's desired, existing and ready replicas)."""
    desired, _, ready = counts
    if ready >= desired:
        return None
    selector = selector_string(selector_labels(name, "engine"))
    try:
        pods = await kube.list(POD.collection_path(namespace), selector)
    except KubeError as error:  # e.g. no RBAC for pods yet: status says less, nothing breaks
        logger.warning("cannot list the engine pods of %s: %s", name, error)
        return None
    return engine_failure(pods)
