"""Tenant isolation of the prefix cache: the router forwards every request with a `cache_salt`
derived from the bearer key its client presents (on by default when clients need a key), hashes it
on the salted chain the engine will use, and never tells a client how much of its prompt a
replica holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers

from pagedock.kv.block_hash import hash_blocks, lora_root_hash, root_hash, salted_root_hash
from pagedock.limits import MAX_CACHE_SALT_CHARS
from pagedock.protocol import CompletionRequest
from router.http.proxy import PREDICTED_CACHED_HEADER
from router.http.request_parser import Parsed, RequestParser
from router.http.tenant_salt import forwarded_salt, salts_by_tenant, tenant_tag, with_cache_salt
from router.kv.prompt_hasher import PromptBlocks, PromptHasher
from router.server.cli import build_parser
from tests.router.factories import make_config
from tests.router.fake_replica import FakeReplica, ServerThread, serve_router

ROOT = root_hash("tiny:float32")
TOKENS = list(range(3, 67))  # four full blocks of 16
PROMPT = {"prompt": TOKENS, "max_tokens": 1}


def bearer(key: str) -> Headers:
    return Headers({"authorization": f"Bearer {key}"})


def parse(body: dict[str, Any], tenant: str | None, **config: Any) -> Parsed:
    parser = RequestParser(make_config(**config), PromptHasher(None), ThreadPoolExecutor(1))
    raw = json.dumps(body).encode()
    return asyncio.run(parser.parse_and_hash(raw, CompletionRequest, tenant))


@pytest.fixture()
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


# ---- the salt ----------------------------------------------------------------------------------


def test_a_tenant_is_a_digest_of_its_key_never_the_key() -> None:
    tag = tenant_tag(bearer("sk-tenant-a"))
    assert "sk-tenant-a" not in tag and len(tag) == 32
    assert tag == tenant_tag(Headers({"authorization": "bearer   sk-tenant-a"}))
    assert tag != tenant_tag(bearer("sk-tenant-b"))
    assert tenant_tag(Headers()) == tenant_tag(Headers({"authorization": ""}))


def test_a_clients_own_salt_is_honoured_under_its_tenant_only() -> None:
    a, b = tenant_tag(bearer("a")), tenant_tag(bearer("b"))
    assert forwarded_salt(a, "s") == forwarded_salt(a, "s") != forwarded_salt(a, "t")
    assert forwarded_salt(a, "s") != forwarded_salt(b, "s")
    # No salt a client picks names another tenant's chain, not even that tenant's own salt.
    assert forwarded_salt(a, forwarded_salt(b, None)) != forwarded_salt(b, None)
    assert forwarded_salt(a, None) not in {forwarded_salt(b, None), forwarded_salt(a, "s")}
    assert len(forwarded_salt(a, "x" * MAX_CACHE_SALT_CHARS)) <= MAX_CACHE_SALT_CHARS


def test_the_salt_replaces_any_in_the_body_and_keeps_every_other_field() -> None:
    body = json.dumps({"prompt": "héllo", "cache_salt": "mine", "n": 2}).encode()
    assert json.loads(with_cache_salt(body, "tenant:t")) == {
        "prompt": "héllo",
        "cache_salt": "tenant:t",
        "n": 2,
    }


def test_a_rewritten_body_stays_utf8_and_a_lone_surrogate_stays_escaped() -> None:
    text = "キャッシュ" * 100
    body = json.dumps({"prompt": text}, ensure_ascii=False).encode()
    assert len(with_cache_salt(body, "t")) < len(body) + 32
    surrogate = json.dumps({"prompt": "a\ud800"}).encode()
    assert json.loads(with_cache_salt(surrogate, "t"))["prompt"] == "a\ud800"


@pytest.mark.parametrize(
    ("fields", "on"),
    [
        ({}, False),
        ({"api_key": "k"}, True),
        ({"api_key": "k", "cache_salt_by_tenant": False}, False),
        ({"cache_salt_by_tenant": True}, True),
    ],
)
def test_salting_by_tenant_is_on_by_default_exactly_when_clients_need_a_key(
    fields: dict[str, Any], on: bool
) -> None:
    assert salts_by_tenant(make_config(**fields)) is on


def test_the_flags_carry_the_fields_name() -> None:
    parser = build_parser()
    on = parser.parse_args(["--cache-salt-by-tenant", "--predicted-cached-tokens-header"])
    assert (on.cache_salt_by_tenant, on.predicted_cached_tokens_header) == (True, True)
    assert parser.parse_args(["--no-cache-salt-by-tenant"]).cache_salt_by_tenant is False
    assert parser.parse_args([]).cache_salt_by_tenant is None


# ---- hashing: as the engine will --------------------------------------------------------------


def test_two_tenants_identical_prompts_chain_from_different_roots() -> None:
    a, b = (tenant_tag(bearer(k)) for k in ("a", "b"))
    first, again, other = (parse(PROMPT, t).blocks for t in (a, a, b))
    assert first is not None and again is not None and other is not None
    assert first.hashes(ROOT, 16) == again.hashes(ROOT, 16)
    assert set(first.hashes(ROOT, 16)).isdisjoint(other.hashes(ROOT, 16))


def test_a_salted_request_hashes_as_the_engine_chains_its_blocks() -> None:
    """The engine chains a salted request from salted_root_hash(its root, salt)
    (tests/engine/test_cache_salt.py), its adapter's root first for an adapter."""
    tag = tenant_tag(bearer("a"))
    parsed = parse({**PROMPT, "cache_salt": "s"}, tag)
    salt = forwarded_salt(tag, "s")
    assert parsed.request is not None and parsed.request.cache_salt == salt
    assert json.loads(parsed.body)["cache_salt"] == salt
    assert parsed.blocks is not None
    assert parsed.blocks.hashes(ROOT, 16) == hash_blocks(TOKENS, 16, salted_root_hash(ROOT, salt))
    sql = lora_root_hash(ROOT, "sql")
    assert parsed.blocks.hashes(sql, 16) == hash_blocks(TOKENS, 16, salted_root_hash(sql, salt))


def test_without_tenant_salting_a_clients_salt_is_forwarded_and_hashed_as_it_came() -> None:
    raw = {**PROMPT, "cache_salt": "s"}
    parsed = parse(raw, None)
    assert json.loads(parsed.body) == raw
    assert parsed.blocks is not None
    assert parsed.blocks.hashes(ROOT, 16) == hash_blocks(TOKENS, 16, salted_root_hash(ROOT, "s"))
    unsalted = parse(PROMPT, None).blocks
    assert unsalted is not None and unsalted.hashes(ROOT, 16) == hash_blocks(TOKENS, 16, ROOT)


@pytest.mark.parametrize("salt", ["", 7, "x" * (MAX_CACHE_SALT_CHARS + 1)])
def test_a_body_with_a_bad_salt_is_forwarded_untouched_for_the_engine_to_refuse(
    salt: object,
) -> None:
    raw = {**PROMPT, "cache_salt": salt}
    parsed = parse(raw, tenant_tag(bearer("a")))
    assert parsed.request is None and json.loads(parsed.body) == raw


def test_a_streams_resume_plan_carries_the_tenants_salt() -> None:
    tag = tenant_tag(bearer("a"))
    parsed = parse({**PROMPT, "stream": True}, tag)
    assert parsed.plan is not None
    assert json.loads(parsed.plan.body())["cache_salt"] == forwarded_salt(tag, None)


def test_prompt_blocks_of_one_salt_are_cached_per_root() -> None:
    blocks = PromptBlocks(TOKENS, len(TOKENS), "s")
    assert blocks.hashes(ROOT, 16) is blocks.hashes(ROOT, 16)


# ---- over HTTP ---------------------------------------------------------------------------------


def test_with_an_api_key_each_request_is_forwarded_with_its_tenants_salt(
    stack: ExitStack,
) -> None:
    fake = FakeReplica()
    replica = stack.enter_context(ServerThread(fake.app))
    router = serve_router(stack, [replica.url], api_key="k")
    headers = {"authorization": "Bearer k"}
    response = httpx.post(router + "/v1/completions", json=PROMPT, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    tag = tenant_tag(bearer("k"))
    assert json.loads(fake.last_body)["cache_salt"] == forwarded_salt(tag, None)
    salted = {**PROMPT, "cache_salt": "s"}
    httpx.post(router + "/v1/completions", json=salted, headers=headers, timeout=10)
    assert json.loads(fake.last_body)["cache_salt"] == forwarded_salt(tag, "s")


def test_without_a_key_bodies_are_forwarded_as_they_came(stack: ExitStack) -> None:
    fake = FakeReplica()
    replica = stack.enter_context(ServerThread(fake.app))
    router = serve_router(stack, [replica.url])
    body = json.dumps({**PROMPT, "cache_salt": "s"}, indent=1).encode()
    response = httpx.post(router + "/v1/completions", content=body, timeout=10)
    assert response.status_code == 200, response.text
    assert fake.last_body == body


def test_the_predicted_cached_tokens_header_is_not_sent_to_clients(stack: ExitStack) -> None:
    replica = stack.enter_context(ServerThread(FakeReplica().app))
    quiet = serve_router(stack, [replica.url])
    response = httpx.post(quiet + "/v1/completions", json=PROMPT, timeout=10)
    assert response.status_code == 200 and PREDICTED_CACHED_HEADER not in response.headers
    debug = serve_router(stack, [replica.url], predicted_cached_tokens_header=True)
    response = httpx.post(debug + "/v1/completions", json=PROMPT, timeout=10)
    assert response.headers[PREDICTED_CACHED_HEADER] == "0"
