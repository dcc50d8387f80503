"""A CPU engine keeps the memory its steps free, so the next step does not fault it back in."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.worker import host_memory

REPO = Path(__file__).resolve().parents[2]
glibc_only = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

# Three 20 MB blocks held together and then freed, as a step's activations are: glibc by default
# hands the heap's top back to the kernel once it is over twice the largest block it has seen
# freed, so every round faults all ~15,000 pages in again.
ROUNDS = textwrap.dedent(
    """
    import ctypes, resource, sys
    sys.path.insert(0, {repo!r})
    from engine.worker.host_memory import keep_freed_memory
    kept = keep_freed_memory() if sys.argv[1] == "keep" else False
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    size = 20 * 2**20
    def one_round():
        blocks = [libc.malloc(size) for _ in range(3)]
        for b in blocks:
            libc.memset(b, 1, size)
        for b in blocks:
            libc.free(b)
    for _ in range(2):
        one_round()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        one_round()
    print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
).format(repo=str(REPO))


def _page_faults(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k not in host_memory._USER_SETTINGS}
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS, mode],
        env=clean | env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    return out[0], int(out[1])


@glibc_only
def test_freed_step_memory_is_reused_without_page_faults() -> None:
    kept, faults = _page_faults("keep")
    assert kept == "True"
    assert faults < 500  # five rounds of 60 MB: ~75,000 pages if handed back


@glibc_only
def test_without_it_glibc_hands_the_memory_back() -> None:
    # The control: what the setting prevents does happen here.
    kept, faults = _page_faults("default")
    assert kept == "False"
    assert faults > 10_000


@glibc_only
def test_the_users_own_malloc_settings_are_left_alone() -> None:
    kept, faults = _page_faults("keep", MALLOC_TRIM_THRESHOLD_="0")
    assert kept == "False"
    assert faults > 10_000  # their setting, which trims at once, is what holds


def test_an_engine_on_the_cpu_asks_for_it(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.runtime.llm_engine as llm_engine

    calls: list[bool] = []
    monkeypatch.setattr(llm_engine, "keep_freed_memory", lambda: calls.append(True) or True)
    config = EngineConfig(model=str(tiny_model_dir), max_model_len=64, num_kv_blocks=8)
    llm_engine.LLMEngine(config)
    assert calls == [True]
