"""Live processes on loopback for the router's tests: engine replicas and routers, started with
the `pagedock` command, on random free ports, always killed in teardown."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
WORDS = [
    "paged",
    "attention",
    "block",
    "cache",
    "prefix",
    "tenant",
    "router",
    "engine",
    "replica",
    "token",
    "batch",
    "stream",
    "kernel",
    "memory",
    "schedule",
    "latency",
    "policy",
    "cluster",
    "service",
    "prompt",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """One `pagedock` subcommand as a child process, with its log in a file."""

    def __init__(
        self, args: list[str], log: Path, health_path: str = "/health", cpus: set[int] | None = None
    ) -> None:
        self.args = args
        self.cpus = cpus
        """Cores the process (and every thread it starts) may run on; None = any."""
        self.log = log
        self.port = int(args[args.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.health_path = health_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pagedock", *self.args],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=self._pin if self.cpus is not None else None,
            )
        return self

    def _pin(self) -> None:
        # In the child before exec: the affinity holds from the first instruction, so no thread
        # (torch's, uvicorn's) ever runs elsewhere.
        assert self.cpus is not None
        os.sched_setaffinity(0, self.cpus)

    def wait_ready(self, timeout_s: float = 90.0) -> Process:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(self.url + self.health_path, timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(
            f"{self.args[0]} on {self.port} not ready: {self.log.read_text()[-3000:]}"
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


def replica_process(
    model_dir: Path, log_dir: Path, num_kv_blocks: int, *extra: str, port: int | None = None
) -> Process:
    port = port or free_port()
    args = [
        "serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--num-kv-blocks",
        str(num_kv_blocks),
        "--num-threads",
        "1",
        "--max-model-len",
        "512",
        "--log-level",
        "warning",
        *extra,
    ]
    return Process(args, log_dir / f"replica-{port}.log")


def router_process(
    model_dir: Path, log_dir: Path, replicas: list[str], *extra: str, port: int | None = None
) -> Process:
    port = port or free_port()
    args = [
        "route",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--health-interval-s",
        "0.5",
        "--health-timeout-s",
        "0.5",
        "--log-level",
        "warning",
        "--predicted-cached-tokens-header",  # the tests and benchmarks read it
        *extra,
    ]
    for url in replicas:
        args += ["--replica", url]
    return Process(args, log_dir / f"router-{port}.log")


def vllm_events(replica: Process) -> str:
    """Publish vLLM's ZMQ KV events (with a replay socket); the ports as --vllm-replica takes
    them."""
    events, replay = free_port(), free_port()
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{events}",
        "replay_endpoint": f"tcp://*:{replay}",
    }
    replica.args += ["--kv-events-config", json.dumps(config)]
    return f"{events}:{replay}"


def replica_view(router: Process) -> dict[str, dict[str, Any]]:
    body = httpx.get(router.url + "/router/replicas", timeout=5.0).json()
    return {r["url"]: r for r in body["replicas"]}


def wait_until(check: Any, timeout_s: float = 10.0, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


def wait_synced(router: Process, urls: list[str], timeout_s: float = 10.0) -> None:
    """Every replica in `urls` healthy and its KV snapshot applied by the router."""
    wait_until(
        lambda: all(
            (v := replica_view(router).get(u)) and v["healthy"] and v["kv_synced"] for u in urls
        ),
        timeout_s,
    )


@contextlib.contextmanager
def running_fleet(
    routers: list[Process], replicas: list[Process], sync_timeout_s: float = 30.0
) -> Iterator[None]:
    """The replicas started together (they load the model at once), then each router, ready once
    every replica is healthy and synced in it; every process killed however the block ends (one
    a test left stopped is continued first)."""
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        for router in routers:
            router.start().wait_ready(timeout_s=30)
            wait_synced(router, [r.url for r in replicas], sync_timeout_s)
        yield
    finally:
        for process in [*routers, *replicas]:
            if process.proc is not None:
                process.proc.send_signal(signal.SIGCONT)
            process.kill()


def metric_sum(url: str, name: str) -> float:
    """Sum of a Prometheus metric's samples over its label sets."""
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=5.0).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def system_prompt(tokenizer: Any, rng: random.Random, min_tokens: int) -> str:
    words: list[str] = []
    while len(tokenizer.encode(" ".join(words))) < min_tokens:
        words.append(rng.choice(WORDS))
    return " ".join(words)
