"""pagedock.limits is the one source of each shared limit: the engine, the router and the
operator's CRD accept the same block sizes, and share the body limit and the default model."""

from __future__ import annotations

from typing import Any

import jsonschema
import pydantic
import pytest
from llm_operator.api.crd import build_crd
from llm_operator.api.spec import LLMDeploymentSpec

from engine.config import EngineConfig
from engine.server.openai.context import ServerOptions
from pagedock.errors import ConfigError
from pagedock.limits import BLOCK_SIZES, DEFAULT_MODEL, MAX_BODY_BYTES
from router.config import RouterConfig
from tests.k8s_operator.validation import validate_custom_resource
from tests.router.factories import make_config

OPENAPI = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def llmdeployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": {},
        "spec": spec,
    }


def test_the_crd_rejects_an_unsupported_block_size() -> None:
    spec = {"engine": {"blockSize": 24}}
    with pytest.raises(jsonschema.ValidationError):
        validate_custom_resource(llmdeployment(spec), OPENAPI)
    with pytest.raises(pydantic.ValidationError):
        LLMDeploymentSpec.model_validate(spec)


def test_the_crd_offers_exactly_the_engines_block_sizes() -> None:
    engine = OPENAPI["properties"]["spec"]["properties"]["engine"]["properties"]
    assert tuple(engine["blockSize"]["enum"]) == BLOCK_SIZES


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_every_supported_block_size_passes_crd_engine_and_router(block_size: int) -> None:
    validate_custom_resource(llmdeployment({"engine": {"blockSize": block_size}}), OPENAPI)
    assert EngineConfig(block_size=block_size).block_size == block_size
    assert make_config(block_size=block_size).block_size == block_size


def test_the_router_rejects_an_unsupported_block_size() -> None:
    with pytest.raises(
        ConfigError, match=r"block_size must be one of \(8, 16, 32, 64, 128\), got 24"
    ):
        make_config(block_size=24)


def test_the_engine_rejects_an_unsupported_block_size() -> None:
    with pytest.raises(ConfigError, match="block_size must be one of"):
        EngineConfig(block_size=24)


def test_engine_and_router_share_the_body_limit() -> None:
    from router.server import generation

    assert ServerOptions().max_body_bytes == generation.MAX_BODY_BYTES == MAX_BODY_BYTES


def test_engine_router_and_operator_share_the_default_model() -> None:
    assert EngineConfig().model == RouterConfig(replicas=["http://a:1"]).model == DEFAULT_MODEL
    assert LLMDeploymentSpec().model.source == DEFAULT_MODEL
