"""The cold-start benchmark: one real start of a tiny model read stage by stage, and the summary
and table made from runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.cold_start import (
    DEFAULT_ARMS,
    STAGES,
    e2e_runs,
    markdown,
    parse_arms,
    run_once,
    summarize,
)
from tests.tiny_model import make_tiny_llama_dir


def _run(arm: str, rep: int, ready: float, first_token: float) -> dict:
    stages = {"process_start": 0.0, "imports_done": 1.0, "ready": ready}
    return {
        "arm": arm,
        "repetition": rep,
        "discarded": rep < 0,
        "stages": stages,
        "health_ok": ready + 0.1,
        "first_token": first_token,
    }


def test_a_cold_start_is_read_stage_by_stage_with_its_first_token(tmp_path: Path) -> None:
    model = make_tiny_llama_dir(tmp_path / "tiny")
    flags = ["--num-threads", "1", "--num-kv-blocks", "64", "--max-model-len", "64"]

    run = run_once(flags, str(model), tmp_path / "serve.log", timeout_s=120)

    assert [s for s in STAGES if s in run["stages"]] == list(STAGES)
    assert run["stages"]["ready"] <= run["health_ok"] + run["spawn_to_process_start_s"] + 0.5
    assert run["health_ok"] <= run["first_token"]
    assert abs(run["spawn_to_process_start_s"]) < 1.0


def test_the_summary_skips_discarded_runs_and_takes_medians_per_arm() -> None:
    runs = [
        _run("before", -1, 99.0, 99.0),
        _run("before", 0, 5.0, 6.0),
        _run("after", 0, 3.0, 4.0),
        _run("before", 1, 7.0, 8.0),
        _run("after", 1, 4.0, 5.0),
    ]

    summary = summarize(runs, ["before", "after"])

    assert summary["before"]["ready"] == {"median": 6.0, "min": 5.0, "max": 7.0, "n": 2}
    assert summary["after"]["first_token"]["median"] == 4.5
    assert "weights_loaded" not in summary["after"]  # never reached in these runs


def test_the_table_has_a_row_per_stage_and_a_column_per_arm() -> None:
    runs = [_run("before", 0, 5.0, 6.0), _run("after", 0, 3.0, 4.0)]
    result = {
        "arms": {"before": ["--no-cpu-kernels-cache"], "after": []},
        "summary": summarize(runs, ["before", "after"]),
        "machine": {"cpu_model": "Test CPU", "cores_usable": 2},
        "settings": {"model": "smollm2-135m-instruct", "repetitions": 1},
        "date": "2026-12-02 12:00 UTC",
        "git_commit": "abc1234",
    }

    table = markdown(result)

    assert "| stage | before | after |" in table
    assert "| ready | 5.00 (5.00–5.00) | 3.00 (3.00–3.00) |" in table
    assert "| weights_loaded | – | – |" in table
    assert "| time to first token (from spawn; e2e: from the request) |" in table
    assert "`after`: (defaults)" in table


def test_arms_are_named_flag_lists_and_default_to_before_and_after() -> None:
    assert parse_arms([]) == DEFAULT_ARMS
    assert parse_arms(["a=--x 1", "b="]) == {"a": ["--x", "1"], "b": []}
    with pytest.raises(SystemExit):
        parse_arms(["no-equals-sign"])


def test_e2e_lines_become_runs_with_the_request_s_time_to_first_token(tmp_path: Path) -> None:
    line = {
        "arm": "after",
        "scale_from_zero_ttft_s": 7.8,
        "total_s": 8.6,
        "pod": "smollm2-engine-1-a",
        "stages": {"process_start": 0.0, "ready": 4.0},
        "status_startup": {},
    }
    path = tmp_path / "e2e.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "arm": "before"}) + "\n")

    runs = e2e_runs(path)

    assert [(r["arm"], r["first_token"], r["discarded"]) for r in runs] == [
        ("after", 7.8, False),
        ("before", 7.8, False),
    ]
    assert summarize(runs, ["before", "after"])["after"]["ready"]["median"] == 4.0
