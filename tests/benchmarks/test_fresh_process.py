"""One repetition in a process of its own: its last JSON line, with its memory added."""

import os
import sys
from pathlib import Path

import pytest

from benchmarks.fresh_process import run_spec
from benchmarks.online_vs_vllm import warmup_prompts

ECHO = (
    "import json, sys\n"
    "spec = json.load(open(sys.argv[-1]))\n"
    "print('a log line')\n"
    "print(json.dumps({'doubled': spec['n'] * 2}))\n"
)


def test_the_childs_last_json_line_comes_back_with_its_peak_memory(tmp_path: Path) -> None:
    command = [sys.executable, "-c", ECHO]
    result = run_spec(command, {"n": 21}, dict(os.environ), tmp_path / "log", timeout_s=120)
    assert result["doubled"] == 42
    assert {"peak_pss_mb", "peak_rss_mb", "wall_s", "memory_sampler_cpu_s"} <= set(result)


def test_a_failed_child_is_an_error_showing_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; sys.stderr.write('no model here'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"exit 3(.|\n)*no model here"):
        run_spec(command, {}, dict(os.environ), tmp_path / "log", timeout_s=120)


def test_online_warm_up_prompts_share_no_block_with_any_repetition() -> None:
    assert len(warmup_prompts(8, repetitions=3, num_measured=128)) == 8
