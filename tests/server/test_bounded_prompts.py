"""Bounded work before admission: the character bound refuses without tokenizing, tokenizing runs
off the event loop, and the connection limits reach uvicorn."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from engine.server.openai.context import ServerOptions
from engine.server.openai.prompt_work import MAX_CHARS_PER_TOKEN
from engine.server.serve import build_uvicorn_config
from tests.server.inprocess_server import InProcessServer


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the tokenizer was called")


def test_prompt_over_character_bound_is_refused_without_tokenizing(
    inprocess_server: InProcessServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inprocess_server.ctx.tokenizer, "encode", _refuse)
    monkeypatch.setattr(inprocess_server.ctx.tokenizer, "apply_chat_template", _refuse)
    text = "a" * (inprocess_server.ctx.max_model_len * MAX_CHARS_PER_TOKEN + 1)
    for path, body in [
        ("/v1/completions", {"prompt": text, "max_tokens": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}),
    ]:
        start = time.monotonic()
        r = httpx.post(f"{inprocess_server.url}{path}", json=body, timeout=30)
        assert time.monotonic() - start < 2.0
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "context_length_exceeded"


def test_health_answers_while_a_prompt_is_being_tokenized(
    inprocess_server: InProcessServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.server.openai.completions as completions

    real = completions.completion_prompts
    entered = threading.Event()

    def slow_prompts(*args: Any) -> Any:
        entered.set()
        time.sleep(1.0)  # holds this pool thread, not the event loop
        return real(*args)

    monkeypatch.setattr(completions, "completion_prompts", slow_prompts)
    body = {"prompt": "hello", "max_tokens": 1}
    slow = threading.Thread(
        target=httpx.post,
        args=(f"{inprocess_server.url}/v1/completions",),
        kwargs={"json": body, "timeout": 30},
    )
    slow.start()
    assert entered.wait(10)
    start = time.monotonic()
    health = httpx.get(f"{inprocess_server.url}/health", timeout=5)
    assert time.monotonic() - start < 0.5
    assert health.status_code == 200
    slow.join(30)


def test_connection_limits_reach_uvicorn_config() -> None:
    options = ServerOptions(max_connections=7, keep_alive_timeout_s=11, request_read_timeout_s=4)
    config = build_uvicorn_config(None, options)  # type: ignore[arg-type]
    assert config.limit_concurrency is None  # the protocol's cap answers in OpenAI's shape
    assert config.http.max_connections == 7  # type: ignore[union-attr]
    assert config.timeout_keep_alive == 11
    assert config.http.read_timeout_s == 4  # type: ignore[union-attr]
    unlimited = build_uvicorn_config(None, ServerOptions(max_connections=0))  # type: ignore[arg-type]
    assert unlimited.http.max_connections == 0  # type: ignore[union-attr]
