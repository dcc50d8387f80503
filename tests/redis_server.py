"""A real redis-server for the tests: on a free loopback port, its files in a temp dir, nothing
persisted. CI installs Debian's redis-server (.ci/run); never a mock."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server; CI has it)")
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = directory / "redis.log"
        command = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(self.log_path),
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout_s: float = 20.0) -> RedisServer:
        """Until it answers PING (a deadline, and its log in the failure)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if client.ping():
                    client.close()
                    return self
            except redis.RedisError as e:
                last = e
            time.sleep(0.05)
        self.stop()
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        raise TimeoutError(f"redis-server did not answer PING ({last}):\n{log}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_redis(directory: Path) -> RedisServer:
    server = RedisServer(directory)
    try:
        return server.wait_ready()
    except BaseException:
        server.stop()
        raise
