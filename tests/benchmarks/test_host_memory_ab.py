"""The host-memory A/B: both settings in fresh processes, interleaved, order swapped."""

import json
import subprocess
from typing import Any

import pytest

from benchmarks import host_memory_ab


def test_each_repetition_runs_both_settings_swapping_which_goes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def fake_run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.append(command[command.index("--child") + 1])
        figures = dict.fromkeys(host_memory_ab.FIGURES, 1.0)
        return subprocess.CompletedProcess(command, 0, json.dumps(figures), "")

    monkeypatch.setattr(host_memory_ab.subprocess, "run", fake_run)
    runs = host_memory_ab.run_pairs(repetitions=3, num_steps=2)
    order = ["kept", "glibc default", "glibc default", "kept", "kept", "glibc default"]
    assert seen == order
    assert [r["system"] for r in runs] == order
    assert [r["repetition"] for r in runs] == [0, 0, 1, 1, 2, 2]
    assert all(set(host_memory_ab.FIGURES) <= set(r) for r in runs)
