"""benchmarks/quantized_decode.py on the tiny model: both arms run the same work, alternating, and
the result file holds each arm's figures, their ratio and the quantized arm's smaller weights."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.quantized_decode import main
from tests.tiny_model import make_tiny_llama_dir


def test_both_arms_decode_the_same_work_and_the_ratio_is_reported(tmp_path: Path) -> None:
    model = make_tiny_llama_dir(tmp_path / "tiny")
    out = tmp_path / "q.json"
    args = ["--model", str(model), "--concurrency", "1", "2", "--max-tokens", "4"]
    main(
        [*args, "--repetitions", "2", "--prefill-tokens", "40", "--allow-dirty", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert [(r["arm"], r["repetition"]) for r in result["runs"][:4]] == [
        ("bf16", 0),
        ("w8a8", 0),
        ("w8a8", 1),
        ("bf16", 1),
    ]
    summary = result["summary"]["2"]
    for figure in ("output_tokens_per_s", "output_tokens_per_cpu_s"):
        assert summary[figure]["bf16"]["n"] == summary[figure]["w8a8"]["n"] == 2
        assert summary[figure]["w8a8_over_bf16"]["of_medians"] > 0
    assert 0 <= summary["greedy_tokens_matching_bf16"] <= 1
    prefill = result["prefill"]["prompt_tokens_per_cpu_s"]
    assert prefill["bf16"]["n"] == 2 and prefill["w8a8_over_bf16"]["of_medians"] > 0
    arms = result["arms"]
    assert arms["w8a8"]["weight_bytes"] < arms["bf16"]["weight_bytes"]
    assert result["load_average_before"] and result["machine"]
