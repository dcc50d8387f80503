"""`pagedock serve --tensor-parallel-size 2` live: the OpenAI API answers (chat, completions,
streamed and not) with the same greedy text as one rank; killing a rank makes /health fail within
seconds and the process exit non-zero, leaving no worker behind."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server

pytestmark = pytest.mark.timeout(300)
# float32 throughout: a rank's half-size GEMMs match the whole model's only without bf16 rounding.
ARGS = ("--max-model-len", "256", "--num-kv-blocks", "64", "--dtype", "float32")


@pytest.fixture(scope="module")
def tp_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    args = tiny_server_args(tiny_model_dir, *ARGS, "--tensor-parallel-size", "2")
    server = start_server(args, tmp_path_factory.mktemp("logs") / "tp-server.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def one_rank_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = start_server(
        tiny_server_args(tiny_model_dir, *ARGS), tmp_path_factory.mktemp("logs") / "one.log"
    )
    yield server
    server.stop()


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(server.url + path, json=body, timeout=120)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def streamed_text(server: ServerProcess, path: str, body: dict[str, Any]) -> str:
    pieces = []
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            pieces.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(pieces)


def worker_pids(server_pid: int) -> list[int]:
    """The server's spawned children (its tensor-parallel ranks)."""
    children = Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()
    return [
        int(pid) for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def test_completions_and_chat_answer_as_one_rank_does(
    tp_server: ServerProcess, one_rank_server: ServerProcess, model_name: str
) -> None:
    completion = {
        "model": model_name,
        "prompt": "The quick brown",
        "max_tokens": 12,
        "temperature": 0,
    }
    chat = {
        "model": model_name,
        "messages": [{"role": "user", "content": "Prefix caching"}],
        "max_tokens": 12,
        "temperature": 0,
    }
    for path, body, text_of in [
        ("/v1/completions", completion, lambda r: r["choices"][0]["text"]),
        ("/v1/chat/completions", chat, lambda r: r["choices"][0]["message"]["content"]),
    ]:
        expected = text_of(post(one_rank_server, path, body))
        assert text_of(post(tp_server, path, body)) == expected
        assert streamed_text(tp_server, path, body) == expected


def test_a_killed_rank_fails_health_and_ends_the_server_non_zero(tp_server: ServerProcess) -> None:
    [worker] = worker_pids(tp_server.process.pid)
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 10
    healthy = True
    while healthy and time.monotonic() < deadline:
        try:
            healthy = httpx.get(tp_server.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            healthy = False  # already gone
        time.sleep(0.2)
    assert not healthy
    assert tp_server.wait_exit(60) != 0
    assert "tensor-parallel rank 1" in tp_server.log()
