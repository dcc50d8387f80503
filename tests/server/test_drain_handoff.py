"""At the drain deadline a stream a router can resume (it asked for its token ids, one choice) is
handed off: it ends with the handoff event and without [DONE], its ids so far sent; /health names
the weights' identity a router resumes it on."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from pagedock.protocol.openai import HANDOFF_EVENT
from tests.server.conftest import tiny_server_args
from tests.server.server_process import ServerProcess, start_server


def test_a_resumable_stream_is_handed_off_at_the_drain_deadline(
    long_tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = tiny_server_args(long_tiny_model_dir, "--drain-timeout", "0.5")
    server: ServerProcess = start_server(args, tmp_path / "handoff.log")
    try:
        root = httpx.get(f"{server.url}/health", timeout=5).json()["root_hash"]
        assert len(bytes.fromhex(root)) > 0
        body = {
            "prompt": "abc",
            "max_tokens": 4000,
            "ignore_eos": True,
            "stream": True,
            "return_token_ids": True,
        }
        lines: list[str] = []
        with (
            httpx.Client(base_url=server.url, timeout=60) as client,
            client.stream("POST", "/v1/completions", json=body) as stream,
        ):
            for line in stream.iter_lines():
                if not lines:
                    server.terminate()  # once the stream is under way
                lines.append(line)
        assert "data: [DONE]" not in lines
        assert lines[-2:] == [HANDOFF_EVENT.strip(), ""] or lines[-1] == HANDOFF_EVENT.strip()
        chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        ids = [i for c in chunks for choice in c["choices"] for i in choice["token_ids"]]
        assert 0 < len(ids) < 4000
        assert all(choice["finish_reason"] is None for c in chunks for choice in c["choices"])
        assert server.wait_exit(timeout_s=30) == 0
    finally:
        server.stop()
