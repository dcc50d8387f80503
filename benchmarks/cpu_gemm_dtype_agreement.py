"""How far bf16 GEMMs (EngineConfig.cpu_gemm_dtype) move the built-in model's outputs from float32.

    python benchmarks/cpu_gemm_dtype_agreement.py

Greedy, 128 tokens, the same requests through a float32 engine and one with bf16 GEMMs (float32
activations, norms, attention, KV cache): workload A's random-token prompts (flat distributions,
the hardest case for argmax ties) and natural chat prompts. Reports the share of output tokens
identical position by position, the share of outputs identical throughout, where outputs first
differ, and — over the positions before that, where both saw the same context — the largest
difference of the chosen token's log-probability. Needs a CPU with native bf16.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import git_commit, machine_info
from benchmarks.workloads import workload_a
from engine import LLM, SamplingParams
from engine.device import cpu_has_native_bf16

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cpu_gemm_dtype_agreement.json"
MAX_TOKENS = 128
CHAT_PROMPTS = [
    "Explain how a hash map handles collisions.",
    "Write a short poem about the sea at night.",
    "What are the main causes of inflation?",
    "Give three tips for learning a new language.",
    "Describe the water cycle to a ten-year-old.",
    "How does a transistor work?",
    "Summarise the plot of Romeo and Juliet.",
    "What is the difference between TCP and UDP?",
    "Suggest a recipe for a quick vegetarian dinner.",
    "Why is the sky blue?",
    "How do vaccines train the immune system?",
    "List the planets of the solar system in order.",
    "What makes a good unit test?",
    "Explain recursion with an example.",
    "What should I pack for a weekend hike?",
    "How does compound interest work?",
]


def generate(gemm_dtype: str, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    llm = LLM(dtype="auto", cpu_gemm_dtype=gemm_dtype)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True, logprobs=0)
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [
        (o.outputs[0].token_ids, [s.logprob or 0.0 for s in o.outputs[0].logprobs or []])
        for o in outs
    ]


def compare(
    reference: list[tuple[list[int], list[float]]], other: list[tuple[list[int], list[float]]]
) -> dict[str, Any]:
    same = total = 0
    first_differences: list[int] = []
    logprob_gaps: list[float] = []
    identical = 0
    for (ref_ids, ref_lp), (ids, lp) in zip(reference, other, strict=True):
        same += sum(a == b for a, b in zip(ref_ids, ids, strict=True))
        total += len(ref_ids)
        first = next(
            (i for i, (a, b) in enumerate(zip(ref_ids, ids, strict=True)) if a != b), len(ref_ids)
        )
        first_differences.append(first)
        identical += first == len(ref_ids)
        logprob_gaps += [abs(a - b) for a, b in zip(ref_lp[:first], lp[:first], strict=True)]
    return {
        "requests": len(reference),
        "identical_token_share": same / total,
        "identical_outputs": identical,
        "first_difference_median": statistics.median(first_differences),
        "first_difference_min": min(first_differences),
        "chosen_logprob_abs_diff_max": max(logprob_gaps),
        "chosen_logprob_abs_diff_median": statistics.median(logprob_gaps),
    }


def main() -> None:
    if not cpu_has_native_bf16():
        sys.exit("this CPU has no native bf16 (avx512_bf16 / amx_bf16): nothing to measure")
    tokenizer = LLM(dtype="float32").engine.tokenizer
    if tokenizer is None:
        sys.exit("the built-in model loaded without a tokenizer: the chat prompts need one")
    chats: list[list[int]] = []
    for prompt in CHAT_PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True)
        assert isinstance(ids, list)  # tokenize=True gives token ids
        chats.append(ids)
    prompt_sets = {"workload A (random tokens)": workload_a(49152, 64).prompts, "chat": chats}
    results = {}
    for name, prompts in prompt_sets.items():
        reference = generate("float32", prompts)
        results[name] = compare(reference, generate("bfloat16", prompts))
        print(name, json.dumps(results[name]), flush=True)
    OUT.write_text(
        json.dumps(
            {
                "what": "greedy agreement of bf16 GEMMs with float32, built-in model",
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": machine_info(),
                "commit": git_commit(ROOT),
                "max_tokens": MAX_TOKENS,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
