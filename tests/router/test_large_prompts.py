"""Large prompts cost the router's event loop nothing: parsed and hashed in its prompt pool, and
over --max-hash-bytes routed by load alone, never tokenized."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from pagedock.http.validation_process import model_named
from pagedock.text.tokenizer import Tokenizer
from router.config import RouterConfig
from router.http.request_parser import INLINE_PARSE_BYTES
from router.kv.prompt_hasher import PromptHasher
from router.replicas.discovery.static import StaticDiscovery
from router.server.app import build_app
from router.server.context import RouterContext
from tests.router.fake_replica import FakeReplica, ServerThread
from tests.tiny_model import make_tiny_llama_dir

pytestmark = pytest.mark.timeout(60)


class RecordingHasher(PromptHasher):
    """The real hasher, noting which thread hashed each request."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(tokenizer)
        self.threads: list[str] = []

    def completion(self, body):  # type: ignore[no-untyped-def]
        self.threads.append(threading.current_thread().name)
        return super().completion(body)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer.from_hf_dir(make_tiny_llama_dir(tmp_path_factory.mktemp("tiny")))


@pytest.fixture()
def served(tokenizer: Tokenizer) -> Iterator[tuple[str, RecordingHasher, FakeReplica]]:
    with ExitStack() as stack:
        fake = FakeReplica("ok")
        replica = stack.enter_context(ServerThread(fake.app)).url
        config = RouterConfig(replicas=[replica], model=None, max_hash_bytes=200_000)
        hasher = RecordingHasher(tokenizer)
        ctx = RouterContext(config, hasher, StaticDiscovery(config.replicas))
        yield stack.enter_context(ServerThread(build_app(ctx))).url, hasher, fake


def post(router: str, prompt_chars: int) -> httpx.Response:
    body = {"prompt": "word " * (prompt_chars // 5), "max_tokens": 2}
    return httpx.post(router + "/v1/completions", json=body, timeout=30)


def test_a_small_prompt_is_hashed_on_the_event_loop(
    served: tuple[str, RecordingHasher, FakeReplica],
) -> None:
    router, hasher, _ = served
    assert post(router, 100).status_code == 200
    assert not hasher.threads[0].startswith("pagedock-prompt")


def test_a_large_prompt_is_hashed_in_the_prompt_pool(
    served: tuple[str, RecordingHasher, FakeReplica],
) -> None:
    router, hasher, _ = served
    assert post(router, INLINE_PARSE_BYTES * 4).status_code == 200
    assert hasher.threads[0].startswith("pagedock-prompt")


def test_a_prompt_over_the_hash_cap_is_routed_without_tokenizing(
    served: tuple[str, RecordingHasher, FakeReplica],
) -> None:
    router, hasher, fake = served
    assert post(router, 300_000).status_code == 200
    assert hasher.threads == [] and fake.calls == 1


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (b'{"model": "m", "prompt": [1, "x"]}', "m"),
        (b'{"model": 3}', None),
        (b"[1, 2]", None),
        (b"not json", None),
        (b"\xff\xfe", None),
    ],
)
def test_an_invalid_bodys_model_is_read_without_building_its_prompt(
    body: bytes, model: str | None
) -> None:
    """The engine that answers an invalid body is one that serves its model."""
    assert model_named(body) == model
