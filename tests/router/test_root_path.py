"""--root-path: the router serves an Ingress path prefix itself (no rewrite in the Ingress)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from pagedock.errors import ConfigError
from tests.router.factories import make_config
from tests.router.fake_replica import FakeReplica, ServerThread
from tests.router.test_proxy import PROMPT, serve_router

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def router() -> Iterator[tuple[str, FakeReplica]]:
    with ExitStack() as stack:
        fake = FakeReplica("ok")
        replica = stack.enter_context(ServerThread(fake.app))
        yield serve_router(stack, [replica.url], root_path="/llm/"), fake


def test_a_prefixed_request_is_served_and_forwarded_without_the_prefix(
    router: tuple[str, FakeReplica],
) -> None:
    url, fake = router
    response = httpx.post(url + "/llm/v1/completions", json=PROMPT, timeout=10)
    assert response.status_code == 200, response.text
    assert fake.calls == 1  # the fake serves /v1/completions only


def test_unprefixed_paths_still_work_and_lookalike_prefixes_do_not(
    router: tuple[str, FakeReplica],
) -> None:
    url, _ = router
    assert httpx.get(url + "/health").status_code == 200
    assert httpx.get(url + "/llm/health").status_code == 200
    assert httpx.post(url + "/llmx/v1/completions", json=PROMPT).status_code == 404


def test_root_path_must_be_absolute() -> None:
    assert make_config(root_path="/llm/").root_path == "/llm"
    assert make_config(root_path="/").root_path == ""
    with pytest.raises(ConfigError, match="root_path"):
        make_config(root_path="llm")
