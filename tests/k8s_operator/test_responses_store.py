"""spec.responses: the engines' Responses API store, rendered into the engine pods (the Redis URL
from its Secret, never in clear) and validated with a message that says what to change."""

import json
from typing import Any

import pytest
from llm_operator.api.spec import InvalidSpecError, parse_spec
from llm_operator.builders import build_children

from tests.k8s_operator.test_builders import find, make_context
from tests.k8s_operator.validation import validate_kubernetes

REDIS = {
    "store": "redis",
    "redisURLSecret": {"name": "responses-redis", "key": "url"},
    "ttlSeconds": 3600,
}


def container(spec: dict[str, Any], name: str = "chat-engine") -> dict[str, Any]:
    deployment = find(build_children(make_context(spec)), "Deployment", name)
    [found] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(found)


def env(found: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in found.get("env", [])}


def test_by_default_the_engines_keep_their_own_memory_store() -> None:
    engine = container({})
    assert "PAGEDOCK_RESPONSES_STORE" not in env(engine)
    assert not [a for a in engine["args"] if a.startswith("--responses-store")]


def test_a_redis_store_reaches_the_engines_from_its_secret_only() -> None:
    engine = container({"replicas": 3, "responses": REDIS})
    ref = {"secretKeyRef": {"name": "responses-redis", "key": "url"}}
    assert env(engine)["PAGEDOCK_RESPONSES_STORE"] == ref
    args = engine["args"]
    assert args[args.index("--responses-store-ttl-s") + 1] == "3600"
    assert "--responses-store" not in args  # the variable is the flag's value: no URL in args
    assert "redis://" not in json.dumps(build_children(make_context({"responses": REDIS})))


def test_the_router_gets_no_store() -> None:
    assert "PAGEDOCK_RESPONSES_STORE" not in env(container({"responses": REDIS}, "chat-router"))


def test_a_memory_stores_bound_is_passed_when_set() -> None:
    args = container({"responses": {"maxEntries": 500}})["args"]
    assert args[args.index("--responses-store-max-entries") + 1] == "500"
    assert "--responses-store-ttl-s" not in args


def test_every_child_of_a_redis_deployment_is_valid_kubernetes() -> None:
    for child in build_children(make_context({"responses": REDIS})):
        validate_kubernetes(child)


@pytest.mark.parametrize(
    ("responses", "message"),
    [
        ({"store": "redis"}, r"spec\.responses: .*store redis needs responses\.redisURLSecret"),
        ({"redisURLSecret": {"name": "r"}}, r"redisURLSecret is for responses\.store redis"),
    ],
)
def test_a_store_and_secret_that_disagree_are_refused_saying_what_to_change(
    responses: dict[str, Any], message: str
) -> None:
    body = {"metadata": {"name": "chat"}, "spec": {"responses": responses}}
    with pytest.raises(InvalidSpecError, match=message):
        parse_spec(body)
