"""ServerProcess: a real `pagedock serve` on a random loopback port, for the tests to talk to."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

_REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [sys.executable, "-m", "pagedock", "serve", "--port", str(self.port), *args]
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            cwd=_REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def wait_ready(self, timeout_s: float = 90.0) -> ServerProcess:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pagedock serve exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"pagedock serve not ready in {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers; always leaves no process behind."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()


def start_server(
    args: list[str], log_path: Path, env: dict[str, str] | None = None
) -> ServerProcess:
    server = ServerProcess(args, log_path, env)
    try:
        return server.wait_ready()
    except BaseException:
        server.stop()
        raise
