"""vLLM's own router (`vllm-router` on PyPI, github.com/vllm-project/router, a Rust binary) in
front of `pagedock serve` engines on loopback: its command line per policy, as a child process
that is always killed in teardown. Used by tests/router/test_vllm_router.py and
benchmarks/vllm_router_affinity.py; docs/router.md says what each policy asks of an engine.

What each policy of vllm-router 0.1.17 calls on a pagedock engine:

- round_robin: the request itself, nothing else.
- cache_aware: POST /v1/completions/render or /v1/chat/completions/render (vLLM's render
  contract) for the prompt's token ids, which it matches against an approximate prefix tree of
  what it routed before.
- kv_aware: the same render call, and the engine's ZMQ KV events (vLLM's KVEventBatch,
  `--kv-events-config`), one SUB per engine plus its replay socket. It indexes each BlockStored
  by sha256 of the token ids the event carries, block by block, and keeps the engine's block
  hashes only as names (a parent to hang a chain on, a BlockRemoved to drop): the engine's hashes
  need not equal vLLM's. `--kv-event-block-size` must be the engine's `--block-size`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

POLICIES = ("round_robin", "cache_aware", "kv_aware")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def vllm_router_binary() -> str:
    """The `vllm-router` script of this interpreter's environment (else the one on PATH)."""
    beside = Path(sys.executable).with_name("vllm-router")
    found = str(beside) if beside.exists() else shutil.which("vllm-router")
    if found is None:
        raise FileNotFoundError("vllm-router is not installed: pip install 'pagedock[dev]'")
    return found


@dataclass
class EngineEvents:
    """Where one engine publishes its vLLM-format KV events (its `--kv-events-config`)."""

    worker_url: str
    events_port: int
    replay_port: int | None = None


@dataclass
class VllmRouter:
    """`vllm-router --policy P` in front of `worker_urls`; `events` for kv_aware."""

    policy: str
    worker_urls: list[str]
    model: str
    """The served model name: kv_aware's shared model identity (`--kv-event-model`)."""
    log: Path
    port: int
    metrics_port: int
    events: list[EngineEvents] = field(default_factory=list)
    block_size: int = 16
    log_level: str = "info"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        args = [
            vllm_router_binary(),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--policy", self.policy, "--worker-urls", *self.worker_urls),
            # It checks the workers every 30 s by default before it starts serving.
            *("--worker-startup-check-interval", "1"),
            *("--prometheus-port", str(self.metrics_port), "--log-level", self.log_level),
        ]
        if self.policy == "kv_aware":
            args += ["--kv-event-model", self.model, "--kv-event-block-size", str(self.block_size)]
            for source in self.events:
                args += ["--kv-event-source", f"{source.worker_url}={_tcp(source.events_port)}"]
                if source.replay_port is not None:
                    replay = f"{source.worker_url}={_tcp(source.replay_port)}"
                    args += ["--kv-event-replay-source", replay]
        return args

    def start(self) -> VllmRouter:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> VllmRouter:
        """Serving, with every worker healthy in its own view (GET /workers)."""
        deadline = time.monotonic() + timeout_s
        seen = "nothing"
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log_text()[-3000:]
            try:
                workers = httpx.get(self.url + "/workers", timeout=1.0).json()["workers"]
                seen = str(workers)
                if len(workers) == len(self.worker_urls) and all(w["is_healthy"] for w in workers):
                    return self
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.2)  # polling interval, not synchronisation: the loop waits for /workers
        raise AssertionError(f"vllm-router not ready; last /workers: {seen}\n{self.log_text()}")

    def log_text(self) -> str:
        """Its log so far, without terminal colours."""
        return _ANSI.sub("", self.log.read_text(errors="replace")) if self.log.exists() else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self.proc = None


def _tcp(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"
