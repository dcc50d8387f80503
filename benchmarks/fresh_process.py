"""Runs one repetition in a process of its own and watches its memory from spawn to exit.

The child reads a JSON spec file (its path is the last argument) and prints one JSON line with its
figures; every line before it (logs) is ignored. Its process tree's peak PSS and RSS are added.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.process_memory import TreeMemorySampler


def run_spec(
    command: list[str], spec: dict[str, Any], env: dict[str, str], log: Path, timeout_s: float
) -> dict[str, Any]:
    """`command SPEC.json` in a fresh process; its last JSON line plus memory and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        started = time.perf_counter()
        with log.open("ab") as stderr:
            process = subprocess.Popen(
                [*command, str(spec_path)], env=env, stdout=subprocess.PIPE, stderr=stderr
            )
            sampler = TreeMemorySampler(process.pid)
            try:
                stdout, _ = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise RuntimeError(
                    f"{command[-1]} ran past {timeout_s:.0f} s; log: {log}"
                ) from None
            finally:
                sampler.stop()
        wall_s = time.perf_counter() - started
    return _last_json_line(stdout.decode(), process.returncode, log) | {
        "wall_s": wall_s,
        **sampler.as_dict(),
    }


def _last_json_line(stdout: str, returncode: int, log: Path) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if returncode != 0 or not lines:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"the run failed (exit {returncode}); log {log}:\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
