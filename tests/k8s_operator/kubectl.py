"""Debian's kubectl run against the emulator (KUBECONFIG points at it: conftest.py)."""

from __future__ import annotations

import asyncio
import shutil

import pytest

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


async def kubectl(*args: str, stdin: str | None = None) -> tuple[int, str]:
    """kubectl's exit code and its output (stdout and stderr together)."""
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate(None if stdin is None else stdin.encode())
    assert process.returncode is not None
    return process.returncode, output.decode()


async def kubectl_ok(*args: str, stdin: str | None = None) -> str:
    """kubectl's output; fails the test with it when kubectl fails."""
    code, output = await kubectl(*args, stdin=stdin)
    assert code == 0, f"kubectl {' '.join(args)}: {output}"
    return output
