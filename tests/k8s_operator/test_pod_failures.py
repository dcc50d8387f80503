"""Engine pods → the failure that status names (reason, message), one cause per test."""

from llm_operator.fleet.pod_failures import PodFailure, engine_failure, pod_failure

from tests.k8s_operator.pods import (
    BAD_IMAGE,
    GPU_MESSAGE,
    crash_loop,
    err_image_pull,
    image_pull_backoff,
    make_pod,
    missing_secret,
    oom_killed,
    unschedulable,
)


def test_image_pull_backoff_names_the_pod_and_the_image() -> None:
    assert pod_failure(image_pull_backoff("chat-engine-abc")) == PodFailure(
        "ImagePullBackOff", f'pod chat-engine-abc: Back-off pulling image "{BAD_IMAGE}"'
    )


def test_err_image_pull_carries_the_registry_error() -> None:
    failure = pod_failure(err_image_pull())
    assert failure is not None and failure.reason == "ErrImagePull"
    assert failure.message.endswith("registry.test/engine:missing: not found")


def test_unschedulable_carries_the_scheduler_message() -> None:
    assert pod_failure(unschedulable("chat-engine-abc")) == PodFailure(
        "Unschedulable", f"pod chat-engine-abc: {GPU_MESSAGE}"
    )


def test_crash_loop_names_the_last_termination() -> None:
    failure = pod_failure(crash_loop("chat-engine-abc"))
    assert failure is not None and failure.reason == "CrashLoopBackOff"
    assert failure.message.startswith("pod chat-engine-abc: back-off 2m40s restarting")
    assert failure.message.endswith("; last terminated: OOMKilled (exit code 137)")


def test_crash_loop_shows_the_tail_of_the_termination_message() -> None:
    last = {"reason": "Error", "exitCode": 1, "message": "x" * 500 + "torch.OutOfMemoryError"}
    failure = pod_failure(crash_loop(last=last))
    assert failure is not None
    assert "last terminated: Error (exit code 1): " in failure.message
    assert failure.message.endswith("torch.OutOfMemoryError")
    assert len(failure.message) < 400


def test_oom_killed_before_the_back_off_is_named_as_such() -> None:
    restarting = make_pod(last_terminated=oom_killed())
    assert pod_failure(restarting) == PodFailure(
        "OOMKilled", "pod chat-engine-7d9f8-x2k4q: last terminated: OOMKilled (exit code 137)"
    )


def test_a_crash_stays_named_while_the_container_restarts() -> None:
    after_an_error = make_pod(last_terminated={"reason": "Error", "exitCode": 1})
    assert pod_failure(after_an_error) == PodFailure(
        "CrashLoopBackOff",
        "pod chat-engine-7d9f8-x2k4q: restarting after a crash; "
        "last terminated: Error (exit code 1)",
    )


def test_an_old_crash_is_forgotten_once_the_container_started() -> None:
    started = make_pod(last_terminated=oom_killed())
    started["status"]["containerStatuses"][0]["started"] = True  # serving, readiness failing
    assert pod_failure(started) is None


def test_missing_secret_is_a_config_error() -> None:
    assert pod_failure(missing_secret()) == PodFailure(
        "CreateContainerConfigError", 'pod chat-engine-7d9f8-x2k4q: secret "hf-token" not found'
    )


def test_a_failing_init_container_counts() -> None:
    pod = make_pod()
    waiting = {"reason": "CreateContainerError", "message": "context deadline exceeded"}
    pod["status"]["initContainerStatuses"] = [{"name": "fetch", "state": {"waiting": waiting}}]
    assert pod_failure(pod) == PodFailure(
        "CreateContainerError", "pod chat-engine-7d9f8-x2k4q: context deadline exceeded"
    )


def test_starting_ready_and_terminating_pods_are_not_failures() -> None:
    creating = make_pod(waiting={"reason": "ContainerCreating"})
    loading = make_pod()
    ready_after_an_oom = make_pod(last_terminated=oom_killed(), ready=True)
    terminating = image_pull_backoff()
    terminating["metadata"]["deletionTimestamp"] = "2026-11-30T12:05:00Z"
    pods = [creating, loading, ready_after_an_oom, terminating]
    assert [pod_failure(pod) for pod in pods] == [None, None, None, None]
    assert engine_failure(pods) is None


def test_the_most_severe_pod_is_named() -> None:
    pods = [
        unschedulable("chat-engine-a"),
        crash_loop("chat-engine-b"),
        missing_secret("chat-engine-c"),
    ]
    failure = engine_failure(pods)
    assert failure is not None and failure.reason == "CreateContainerConfigError"


def test_pods_failing_alike_name_the_first_by_name() -> None:
    pods = [image_pull_backoff("chat-engine-b"), image_pull_backoff("chat-engine-a")]
    failure = engine_failure(pods)
    assert failure is not None and failure.message.startswith("pod chat-engine-a:")
