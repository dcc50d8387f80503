"""Rolling the routers loses no request: a new router is ready before an old one goes (a surge,
none unavailable), and the old one has a preStop and a grace period that covers its drain."""

from typing import Any

import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.validation import validate_kubernetes


def router_deployment(spec: dict[str, Any]) -> dict[str, Any]:
    ctx = BuildContext("chat", "team-a", LLMDeploymentSpec.model_validate(spec), OperatorSettings())
    [router] = [
        c
        for c in build_children(ctx)
        if (c["kind"], c["metadata"]["name"]) == ("Deployment", "chat-router")
    ]
    return router


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_router_rollout_surges_and_never_lowers_the_serving_routers(replicas: int) -> None:
    router = router_deployment({"router": {"replicas": replicas}})
    assert router["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    validate_kubernetes(router)


def test_an_old_router_has_time_to_finish_its_streams() -> None:
    pod = router_deployment({"drainTimeoutSeconds": 120})["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert pod["terminationGracePeriodSeconds"] >= 5 + 120
