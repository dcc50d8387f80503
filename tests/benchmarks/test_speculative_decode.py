"""The speculative-decoding benchmark's own parts (benchmarks/speculative_decode.py), without a
server: the copy workload it sends, how it reads a stream's token ids, how it compares the two
arms' outputs and counts the drafts, and how it sums up the runs against the bars."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from benchmarks.copy_workload import (
    FIX_TYPOS,
    REPEAT,
    copy_requests,
    paragraphs,
    split_pool,
    with_typos,
)
from benchmarks.speculative_report import acceptance, compare_outputs, markdown, summarize
from benchmarks.streamed_tokens import Streamed, read_event

TEXT = "\n\n".join(
    " ".join(f"word{p}x{w}" for w in range(words)) for p, words in enumerate([3, 8, 12, 20, 9])
)


def test_paragraphs_within_the_word_range_are_kept_in_order_with_whitespace_collapsed() -> None:
    text = "one two\nthree four\n\n  \nshort\n\nfive  six\tseven eight nine ten"
    assert paragraphs(text, 3, 5) == ["one two three four"]
    assert paragraphs(text, 1, 10)[0] == "one two three four"
    assert len(paragraphs(TEXT, 8, 12)) == 3  # of 3, 8, 12, 20 and 9 words
    with pytest.raises(ValueError, match="min_words"):
        paragraphs(text, 5, 3)


def test_typos_swap_two_letters_inside_words_and_are_seeded() -> None:
    text = "The licenses for most software are designed to take away your freedom to share"
    spoilt = with_typos(text, random.Random(1), rate=0.5)
    assert spoilt != text and len(spoilt) == len(text)
    assert sorted(spoilt) == sorted(text)  # letters moved, none lost
    assert [w[0] for w in spoilt.split()] == [w[0] for w in text.split()]
    assert with_typos(text, random.Random(1), rate=0.5) == spoilt
    assert with_typos(text, random.Random(1), rate=0.0) == text


def test_copy_requests_alternate_repeat_and_fix_typos_on_distinct_paragraphs() -> None:
    pool = paragraphs(TEXT, 1, 100)
    requests = copy_requests(pool, 4, seed=0, typo_rate=1.0)
    assert [r.kind for r in requests] == ["repeat", "fix-typos", "repeat", "fix-typos"]
    assert requests[0].messages == [{"role": "user", "content": REPEAT + requests[0].paragraph}]
    assert requests[1].messages[0]["content"].startswith(FIX_TYPOS)
    assert requests[0].paragraph in pool and requests[1].paragraph not in pool
    assert len({r.paragraph for r in requests}) == 4
    assert copy_requests(pool, 4, seed=0, typo_rate=1.0) == requests
    with pytest.raises(ValueError, match="as many paragraphs"):
        copy_requests(pool, 6, seed=0)


def test_the_pool_splits_into_disjoint_seeded_parts() -> None:
    pool = [f"p{i}" for i in range(10)]
    parts = split_pool(pool, [2, 3, 4], seed=5)
    assert [len(p) for p in parts] == [2, 3, 4]
    assert len({p for part in parts for p in part}) == 9
    assert split_pool(pool, [2, 3, 4], seed=5) == parts
    with pytest.raises(ValueError, match="11 paragraphs"):
        split_pool(pool, [5, 6], seed=0)


def sse(event: dict[str, Any]) -> str:
    return "data: " + json.dumps(event)


def test_a_stream_keeps_its_token_ids_finish_reason_and_usage() -> None:
    result = Streamed()
    for line in [
        sse({"choices": [{"delta": {"role": "assistant"}}]}),
        sse({"choices": [{"delta": {"content": "ab"}, "token_ids": [5, 6]}]}),
        "",
        sse({"choices": [{"text": "c", "token_ids": [7], "finish_reason": "stop"}]}),
        sse({"choices": [], "usage": {"completion_tokens": 3}}),
        "data: [DONE]",
    ]:
        read_event(line, result, started=0.0)
    assert result.token_ids == [5, 6, 7]
    assert result.finish_reason == "stop" and result.num_output_tokens == 3
    assert result.ttft_s is not None and result.error is None
    read_event(sse({"error": {"message": "boom"}}), result, started=0.0)
    assert result.error == "boom"


def test_outputs_are_compared_request_by_request_with_the_first_difference() -> None:
    compared = compare_outputs([[1, 2, 3], [4, 5], [6]], [[1, 2, 3], [4, 9], [6, 7]])
    assert compared["num_requests"] == 3 and compared["num_identical"] == 1
    assert compared["num_tokens_off"] == 6 and compared["num_tokens_on"] == 7
    assert compared["divergences"] == [
        {"request": 1, "first_differing_token": 1},
        {"request": 2, "first_differing_token": 1},
    ]
    with pytest.raises(ValueError, match="answered"):
        compare_outputs([[1]], [])


def test_acceptance_is_what_the_counters_grew_by() -> None:
    before = {"vllm:spec_decode_num_drafts_total": 10.0}
    after = {
        "vllm:spec_decode_num_drafts_total": 14.0,
        "vllm:spec_decode_num_draft_tokens_total": 16.0,
        "vllm:spec_decode_num_accepted_tokens_total": 12.0,
    }
    got = acceptance(before, after)
    assert got["num_drafts"] == 4 and got["num_draft_tokens"] == 16
    assert got["acceptance_rate"] == 0.75 and got["mean_accepted_per_draft"] == 3.0
    assert acceptance({}, {})["acceptance_rate"] is None


def run(scenario: str, arm: str, rep: int, tok_s: float, identical: bool = True) -> dict[str, Any]:
    record: dict[str, Any] = {
        "scenario": scenario,
        "arm": arm,
        "repetition": rep,
        "output_tok_s": tok_s,
    }
    if arm == "on":
        record["outputs_vs_off"] = {"num_requests": 2, "num_identical": 2 if identical else 1}
        record["acceptance"] = {"num_drafts": 2, "num_draft_tokens": 8, "num_accepted_tokens": 6}
    return record


def test_the_summary_gives_on_over_off_against_each_bar() -> None:
    runs = [
        run("copy_c1", "off", 0, 10.0),
        run("copy_c1", "on", 0, 25.0),
        run("copy_c1", "off", 1, 12.0),
        run("copy_c1", "on", 1, 18.0, identical=False),
        run("workload_a", "off", 0, 100.0),
        run("workload_a", "on", 0, 95.0),
    ]
    summary = summarize(runs, {"copy_c1": 1.8, "copy_c4": 1.3, "workload_a": 0.97})
    assert list(summary) == ["copy_c1", "workload_a"]  # copy_c4 did not run
    c1 = summary["copy_c1"]
    assert c1["on_over_off"]["of_medians"] == pytest.approx(21.5 / 11.0)
    assert c1["on_over_off"]["pair_min"] == pytest.approx(1.5)
    assert c1["meets_bar"] is True
    assert c1["outputs"] == {"identical": False, "num_requests": 4, "num_identical": 3}
    assert c1["acceptance"]["acceptance_rate"] == 0.75
    assert summary["workload_a"]["meets_bar"] is False
    table = markdown(summary)
    assert "| copy_c1 |" in table and "1.80x met" in table and "0.97x missed" in table
