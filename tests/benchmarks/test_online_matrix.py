"""The online matrix's pure parts: cells, their requests, issue 40's verdicts, llama-server's KV
budget, and the command line."""

from typing import Any

import pytest

from benchmarks.llama_server import context_tokens, llama_server_flags
from benchmarks.matrix_arms import arm_environment, parse_arm
from benchmarks.matrix_cells import (
    Cell,
    bars,
    cell_verdicts,
    cell_workload,
    matrix_cells,
    num_requests,
    paired_runs,
    parse_cell,
)
from benchmarks.matrix_report import control_arm_lines
from benchmarks.online_matrix import parse_args, parse_knobs
from benchmarks.workloads import workload_a


def make_run(system: str, cell: str, rep: int, **figures: float) -> dict[str, Any]:
    return {"system": system, "cell": cell, "repetition": rep, **figures}


def test_a_cell_is_a_concurrency_and_a_known_mix() -> None:
    assert parse_cell("32:A") == Cell(32, "A")
    assert parse_cell("8:chat").key == "8:chat"


@pytest.mark.parametrize("text", ["32", "x:A", "0:A", "32:medium", ":A"])
def test_a_malformed_cell_is_refused_with_its_text(text: str) -> None:
    with pytest.raises(ValueError, match=r"cell|mix"):
        parse_cell(text)


def test_the_matrix_is_every_concurrency_with_every_mix_unless_cells_are_named() -> None:
    cells = matrix_cells([8, 32], ["chat", "long"])
    assert [c.key for c in cells] == ["8:chat", "8:long", "32:chat", "32:long"]
    assert matrix_cells([8], ["A"], ["1:A", "64:long"]) == [Cell(1, "A"), Cell(64, "long")]
    with pytest.raises(ValueError, match="twice"):
        matrix_cells([], [], ["8:A", "8:A"])


def test_requests_per_cell_are_waves_of_the_concurrency_with_a_floor() -> None:
    assert num_requests(Cell(32, "A"), waves=2, min_requests=16) == 64
    assert num_requests(Cell(1, "A"), waves=2, min_requests=16) == 16


def test_a_cells_requests_keep_their_lengths_and_change_content_per_repetition() -> None:
    first = cell_workload(Cell(8, "long"), 2, 0, 49152, 16, 64)
    second = cell_workload(Cell(8, "long"), 2, 1, 49152, 16, 64)
    assert [len(p) for p in first.prompts] == [len(p) for p in second.prompts]
    assert all(1024 <= len(p) <= 1800 for p in first.prompts)
    assert first.prompts[0][:8] != second.prompts[0][:8]
    assert first.num_generated_tokens == 16 * 64


def test_workload_a_is_unchanged_by_the_shared_generator() -> None:
    a = workload_a(49152, 4, content_seed=7)
    assert [len(p) for p in a.prompts] == [464, 261, 47, 305]
    assert a.max_tokens == 128 and a.name == "A"


def test_verdicts_are_ratios_of_medians_against_each_bar() -> None:
    runs = [
        make_run("pagedock", "32:A", 0, output_tok_s=300, ttft_p99_ms=700, itl_p99_ms=40),
        make_run("vllm-best", "32:A", 0, output_tok_s=200, ttft_p99_ms=1000, itl_p99_ms=100),
        make_run("llama-server", "32:A", 0, output_tok_s=200, ttft_p99_ms=1, itl_p99_ms=1),
        make_run("pagedock", "8:A", 0, output_tok_s=1, ttft_p99_ms=1, itl_p99_ms=1),
    ]
    verdicts = cell_verdicts(runs, Cell(32, "A"), "pagedock", bars("vllm-best", "llama-server"))
    got = {v["bar"]: (round(v["of_medians"], 2), v["met"]) for v in verdicts}
    assert got == {
        "output_tok_s >= 1.3x vllm-best": (1.5, True),
        "ttft_p99_ms <= 0.8x vllm-best": (0.7, True),
        "itl_p99_ms <= 0.5x vllm-best": (0.4, True),
        "output_tok_s >= 2.0x llama-server": (1.5, False),
    }


def test_the_llama_server_bar_does_not_apply_below_concurrency_8() -> None:
    runs = [
        make_run("pagedock", "1:A", 0, output_tok_s=10),
        make_run("llama-server", "1:A", 0, output_tok_s=10),
    ]
    (verdict,) = cell_verdicts(runs, Cell(1, "A"), "pagedock", bars("vllm-best", "llama-server"))
    assert verdict["met"] is None and verdict["of_medians"] == 1.0


def test_llama_server_gets_whole_padded_slots_within_the_kv_bytes() -> None:
    per_token = 23040  # SmolLM2-135M: 30 layers x 3 KV heads x 64 x K,V x 2 bytes
    tokens = context_tokens(2 * 2**30, per_token, 32)
    assert tokens == 32 * 2816 and tokens * per_token <= 2 * 2**30
    flags = llama_server_flags(2 * 2**30, per_token, 32, 2)
    assert flags[flags.index("-c") + 1] == str(tokens) and flags[flags.index("-np") + 1] == "32"
    with pytest.raises(ValueError, match="slots"):
        context_tokens(2**20, per_token, 32)


def test_knobs_read_as_vllm_field_names_with_json_values() -> None:
    assert parse_knobs("max_num_batched_tokens=512,long_prefill_token_threshold=128") == {
        "max_num_batched_tokens": 512,
        "long_prefill_token_threshold": 128,
    }


def test_the_best_vllm_arm_needs_its_knobs_or_a_grid(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--arms", "pagedock", "vllm-best"])
    assert "vllm-best needs" in capsys.readouterr().err
    args = parse_args(["--arms", "pagedock", "--concurrency", "8", "--mixes", "chat"])
    assert [c.key for c in args.cells] == ["8:chat"]


def test_ratios_pair_only_the_repetitions_both_systems_ran() -> None:
    same = {"ttft_p99_ms": 1.0, "itl_p99_ms": 1.0}
    runs = [
        make_run("pagedock", "8:A", 0, output_tok_s=200, **same),
        make_run("vllm-best", "8:A", 0, output_tok_s=100, **same),
        make_run("pagedock", "8:A", 1, output_tok_s=900, **same),
    ]
    (verdict, *_) = cell_verdicts(runs, Cell(8, "A"), "pagedock", bars("vllm-best", "x"))
    assert verdict["of_medians"] == 2.0
    assert paired_runs(runs, "pagedock", "llama-server") == []


def test_a_pagedock_arm_may_set_environment_variables() -> None:
    arm = "pagedock+GOMP_SPINCOUNT=300000+OMP_PROC_BIND=close"
    assert parse_args(["--arms", "pagedock", arm]).arms == ["pagedock", arm]
    assert arm_environment(arm) == {"GOMP_SPINCOUNT": "300000", "OMP_PROC_BIND": "close"}
    assert arm_environment("pagedock") == {}


@pytest.mark.parametrize("arm", ["vllm+X=1", "pagedock+", "pagedock+X", "sglang"])
def test_an_unknown_or_malformed_arm_is_refused(arm: str) -> None:
    with pytest.raises(ValueError, match="arm"):
        parse_arm(arm)


def test_the_report_gives_pagedock_over_each_control_arm() -> None:
    ratio = {"figure": "output_tok_s", "of_medians": 1.27, "pair_min": 0.94, "pair_max": 1.38}
    cells = {
        "1:A": {"ratios": [ratio | {"against": "pagedock+GOMP_SPINCOUNT=300000"}]},
        "8:A": {"ratios": [ratio | {"against": "vllm-best"}]},
    }
    lines = control_arm_lines({"cells": cells})
    assert lines[-1] == (
        "| 1:A | pagedock / pagedock+GOMP_SPINCOUNT=300000 | output_tok_s | 1.27 (0.94–1.38) |"
    )
    assert len(lines) == 4
    assert control_arm_lines({"cells": {"8:A": cells["8:A"]}}) == []
