"""A failure inside one step fails that step's requests, with an error, not the server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.server.inprocess_server import InProcessServer


@pytest.fixture
def broken_next_step(inprocess_server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model runner raises once, as a bug in sampling would."""
    runner = inprocess_server.engine.runner
    real_execute = runner.execute
    calls = {"n": 0}

    def execute(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected sampling failure")
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(runner, "execute", execute)


def test_a_failed_step_fails_its_request_with_500_and_the_next_one_works(
    inprocess_server: InProcessServer, broken_next_step: None
) -> None:
    body = {"prompt": "abc", "max_tokens": 4}
    failed = httpx.post(f"{inprocess_server.url}/v1/completions", json=body, timeout=30)
    assert failed.status_code == 500
    assert "injected sampling failure" in failed.json()["error"]["message"]
    ok = httpx.post(f"{inprocess_server.url}/v1/completions", json=body, timeout=30)
    assert ok.status_code == 200
    assert httpx.get(f"{inprocess_server.url}/health").status_code == 200


def test_a_failed_step_ends_a_stream_with_an_error_event(
    inprocess_server: InProcessServer, broken_next_step: None
) -> None:
    body = {"prompt": "abc", "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{inprocess_server.url}/v1/completions", json=body, timeout=30) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert '"error"' in events[-2] and events[-1] == "data: [DONE]"
