"""The offline API on the built-in model: a chat answer and a batch of completions.

make demo        (or: .venv/bin/python examples/offline_demo.py [MODEL])
"""

from __future__ import annotations

import sys
import time

from engine import LLM, SamplingParams


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m-instruct"
    llm = LLM(model=model)
    greedy = SamplingParams(max_tokens=64, temperature=0.0)
    answer = llm.chat([{"role": "user", "content": "What is the capital of France?"}], greedy)[0]
    print(f"\nchat: {answer.text!r} ({answer.finish_reason})")

    prompts = [f"Write one sentence about the number {i}." for i in range(16)]
    started = time.perf_counter()
    outs = llm.chat([[{"role": "user", "content": p}] for p in prompts], greedy)
    elapsed = time.perf_counter() - started
    generated = sum(len(o.token_ids) for o in outs)
    print(
        f"{len(outs)} chats, {generated} tokens in {elapsed:.1f}s ({generated / elapsed:.0f} tok/s)"
    )
    print(f"first: {outs[0].text!r}")
    stats = llm.stats()
    print(
        f"KV utilisation {stats.kv_utilisation:.1%} (naive reservation: "
        f"{stats.naive_kv_utilisation:.1%}), "
        f"prefix cache hit rate {stats.prefix_cache_hit_rate:.1%}"
    )


if __name__ == "__main__":
    main()
