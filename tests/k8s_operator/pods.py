"""Engine pods as the API server returns them (status in the shape of core/v1 Pod), one per
cause."""

from typing import Any

from llm_operator.names import child_labels

Obj = dict[str, Any]
BAD_IMAGE = "registry.test/engine:missing"
GPU_MESSAGE = (
    "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
    "available: 4 No preemption victims found for incoming pod."
)


def make_pod(
    name: str = "chat-engine-7d9f8-x2k4q",
    *,
    waiting: Obj | None = None,
    last_terminated: Obj | None = None,
    ready: bool = False,
) -> Obj:
    """An engine pod of LLMDeployment `chat`, scheduled; running unless `waiting` says why not."""
    state = {"waiting": waiting} if waiting else {"running": {"startedAt": "2026-11-30T12:00:05Z"}}
    container = {
        "name": "engine",
        "image": BAD_IMAGE,
        "imageID": "",
        "ready": ready,
        "started": ready,
        "restartCount": 4 if last_terminated else 0,
        "state": state,
        "lastState": {"terminated": last_terminated} if last_terminated else {},
    }
    conditions = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T12:00:00Z"},
        {"type": "Ready", "status": str(ready), "lastTransitionTime": "2026-11-30T12:00:00Z"},
    ]
    status = {"phase": "Running", "conditions": conditions, "containerStatuses": [container]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": child_labels("chat", "engine")},
        "spec": {"containers": [{"name": "engine", "image": BAD_IMAGE}]},
        "status": status,
    }


def image_pull_backoff(name: str = "chat-engine-7d9f8-x2k4q") -> Obj:
    message = f'Back-off pulling image "{BAD_IMAGE}"'
    return make_pod(name, waiting={"reason": "ImagePullBackOff", "message": message})


def err_image_pull(name: str = "chat-engine-7d9f8-x2k4q") -> Obj:
    message = (
        f'failed to pull and unpack image "{BAD_IMAGE}": failed to resolve reference '
        f'"{BAD_IMAGE}": registry.test/engine:missing: not found'
    )
    return make_pod(name, waiting={"reason": "ErrImagePull", "message": message})


def unschedulable(name: str = "chat-engine-7d9f8-x2k4q") -> Obj:
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": GPU_MESSAGE,
        "lastTransitionTime": "2026-11-30T12:00:00Z",
    }
    pod = make_pod(name)
    pod["status"] = {"phase": "Pending", "conditions": [scheduled]}  # no node, so no containers
    return pod


def oom_killed() -> Obj:
    return {
        "reason": "OOMKilled",
        "exitCode": 137,
        "startedAt": "2026-11-30T12:01:00Z",
        "finishedAt": "2026-11-30T12:02:10Z",
        "containerID": "containerd://0f3c",
    }


def crash_loop(name: str = "chat-engine-7d9f8-x2k4q", last: Obj | None = None) -> Obj:
    message = f"back-off 2m40s restarting failed container=engine pod={name}_team-a(5c1e)"
    waiting = {"reason": "CrashLoopBackOff", "message": message}
    return make_pod(name, waiting=waiting, last_terminated=last or oom_killed())


def missing_secret(name: str = "chat-engine-7d9f8-x2k4q") -> Obj:
    waiting = {"reason": "CreateContainerConfigError", "message": 'secret "hf-token" not found'}
    return make_pod(name, waiting=waiting)
