"""spec.tracing: the engines' and the router's traces, rendered as the standard OpenTelemetry
variables on both (pagedock/tracing/ reads them), nothing when unset, and a bad endpoint refused
by the CRD's schema with the API server's 422."""

from typing import Any

import pytest
from llm_operator.api.crd import build_crd
from llm_operator.builders import build_children

from tests.k8s_operator.admission import Admission
from tests.k8s_operator.field_errors import Invalid
from tests.k8s_operator.helpers import make_llmd
from tests.k8s_operator.test_builders import make_context
from tests.k8s_operator.test_responses_store import container, env
from tests.k8s_operator.validation import validate_kubernetes

TRACING = {"otlpEndpoint": "http://otel-collector.observability:4318/v1/traces"}


def test_unset_no_pod_gets_a_tracing_variable() -> None:
    for name in ("chat-engine", "chat-router"):
        assert not [k for k in env(container({}, name)) if k.startswith("OTEL_")]


@pytest.mark.parametrize("component", ["engine", "router"])
def test_set_both_engines_and_routers_export_as_their_own_service(component: str) -> None:
    found = env(container({"tracing": {**TRACING, "samplingRatio": 0.25}}, f"chat-{component}"))
    assert found["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == TRACING["otlpEndpoint"]
    assert found["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert found["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    assert found["OTEL_SERVICE_NAME"] == f"chat-{component}"
    assert found["OTEL_RESOURCE_ATTRIBUTES"] == "k8s.namespace.name=team-a"


def test_every_child_of_a_traced_deployment_is_valid_kubernetes() -> None:
    for child in build_children(make_context({"tracing": TRACING})):
        validate_kubernetes(child)


@pytest.mark.parametrize(
    "tracing",
    [{"otlpEndpoint": "otel-collector:4317"}, {**TRACING, "samplingRatio": 1.5}],
    ids=["not-an-http-url", "ratio-above-one"],
)
def test_a_bad_tracing_spec_is_refused_by_the_schema(tracing: dict[str, Any]) -> None:
    with pytest.raises(Invalid) as refused:
        Admission(build_crd()).admit(make_llmd(tracing=tracing), None)
    assert "spec.tracing" in refused.value.message
