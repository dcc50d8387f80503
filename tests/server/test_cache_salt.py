"""vLLM's `cache_salt` over HTTP: `usage.prompt_tokens_details.cached_tokens` finds a prefix
cached only for requests of the same salt, on both generation endpoints; a bad salt is a 400."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest

from pagedock.limits import MAX_CACHE_SALT_CHARS
from tests.server.inprocess_server import InProcessServer
from tests.server.test_limits import assert_openai_error

_prompts = itertools.count()


def fresh_prompt() -> list[int]:
    """40 token ids no other test sends: two full blocks of 16 are found cached on a hit."""
    start = 100 + 40 * next(_prompts)
    return list(range(start, start + 40))


def cached_tokens(server: InProcessServer, prompt: list[int], salt: str | None) -> int:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": 1}
    if salt is not None:
        body["cache_salt"] = salt
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return int(response.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("tenant-a", "tenant-a", 32),
        ("tenant-a", "tenant-b", 0),
        (None, None, 32),
        ("tenant-a", None, 0),
        (None, "tenant-a", 0),
    ],
)
def test_a_prefix_is_found_cached_only_under_the_salt_it_was_computed_with(
    inprocess_server: InProcessServer, first: str | None, second: str | None, expected: int
) -> None:
    prompt = fresh_prompt()
    assert cached_tokens(inprocess_server, prompt, first) == 0
    assert cached_tokens(inprocess_server, prompt, second) == expected


def test_chat_requests_take_a_salt_too(inprocess_server: InProcessServer) -> None:
    body = {"messages": [{"role": "user", "content": "salted " * 4}], "max_tokens": 1}
    url = f"{inprocess_server.url}/v1/chat/completions"

    def cached(salt: str) -> int:
        response = httpx.post(url, json={**body, "cache_salt": salt}, timeout=60)
        assert response.status_code == 200, response.text
        return int(response.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    assert cached("a") == 0
    assert cached("b") == 0
    assert cached("a") > 0


@pytest.mark.parametrize(
    "salt", ['""', '"' + "x" * (MAX_CACHE_SALT_CHARS + 1) + '"', "7", '"\\ud800"']
)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_bad_salt_is_a_400_naming_it(
    inprocess_server: InProcessServer, path: str, salt: str
) -> None:
    """`salt`: the field's JSON (a lone surrogate is a valid JSON escape, and no Unicode)."""
    body = '{"prompt": "hi", "messages": [{"role": "user", "content": "hi"}], "cache_salt": %s}'
    url = f"{inprocess_server.url}{path}"
    headers = {"content-type": "application/json"}
    response = httpx.post(url, content=body % salt, headers=headers, timeout=60)
    assert_openai_error(response, 400, "cache_salt")
