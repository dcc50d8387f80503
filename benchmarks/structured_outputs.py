"""The cost of structured outputs: workload A with 25 % of its requests guided by a JSON schema,
against the same workload with none guided, in one process.

    python benchmarks/structured_outputs.py [--model smollm2-135m-instruct] [--rounds 1]

Runs alternate guided / unguided / unguided / guided (per round), so that a machine whose load
drifts over the run biases neither side. Guided rows end where their grammar ends (their output
is a complete JSON value); unguided rows generate workload A's 128 tokens (ignore_eos). The
figure compared is generated tokens per second; the guided runs also report the time spent
filling grammar bitmasks per step that needed one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importlib.metadata import version

import torch

from benchmarks.machine import git_commit, machine_info
from benchmarks.workloads import Workload, workload_a
from engine import LLM, SamplingParams
from engine.inputs.sampling_params import RequestOutputKind, StructuredOutputsParams

GUIDED_FRACTION_EVERY = 4  # every 4th request: 25 %
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
        },
    },
    "required": ["name", "age", "tags", "address"],
}


def params_for(workload: Workload, guided: bool) -> list[SamplingParams]:
    base = SamplingParams(
        max_tokens=workload.max_tokens,
        temperature=0.0,
        ignore_eos=True,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )
    constraint = StructuredOutputsParams(json=SCHEMA)
    return [
        replace(base, structured_outputs=constraint)
        if guided and i % GUIDED_FRACTION_EVERY == 0
        else base
        for i in range(len(workload.prompts))
    ]


def run_once(llm: LLM, workload: Workload, guided: bool, tag: str) -> dict[str, Any]:
    engine = llm.engine
    params = params_for(workload, guided)
    for p in params:  # compile before the clock starts: this measures decoding, not compiling
        if p.structured_outputs is not None:
            engine.guided.compiled(p.structured_outputs, None)
    manager = engine.guided.manager
    mask_s0, mask_steps0 = (
        (0.0, 0) if manager is None else (manager.mask_time_s, manager.num_mask_steps)
    )
    started = time.perf_counter()
    for i, (prompt, p) in enumerate(zip(workload.prompts, params, strict=True)):
        engine.add_request(f"{tag}-{i}", prompt, p)
    outputs = []
    num_steps = 0
    while engine.has_unfinished_requests():
        outputs += engine.step()
        num_steps += 1
    elapsed = time.perf_counter() - started
    manager = engine.guided.manager
    mask_s = 0.0 if manager is None else manager.mask_time_s - mask_s0
    mask_steps = 0 if manager is None else manager.num_mask_steps - mask_steps0
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    guided_ids = {f"{tag}-{i}" for i, p in enumerate(params) if p.structured_outputs is not None}
    valid = sum(_is_json(o.outputs[0].text) for o in outputs if o.request_id in guided_ids)
    return {
        "guided": guided,
        "elapsed_s": elapsed,
        "steps": num_steps,
        "step_s": elapsed / num_steps,
        "generated_tokens": generated,
        "generated_tok_s": generated / elapsed,
        "guided_requests": len(guided_ids),
        "guided_outputs_valid_json": valid,
        "mask_steps": mask_steps,
        "mask_ms_per_masked_step": 1e3 * mask_s / mask_steps if mask_steps else 0.0,
        "mask_share_of_elapsed": mask_s / elapsed,
    }


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def write_report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    ratio = _guided_over_unguided(runs, "generated_tok_s")
    step_ratio = _guided_over_unguided(runs, "step_s")
    report = {
        "benchmark": "structured_outputs",
        "commit": git_commit(Path(__file__).resolve().parents[1]),
        "machine": machine_info(),
        "xgrammar": version("xgrammar"),
        "note": args.note,
        "settings": {
            "model": args.model,
            "workload": f"A's first {args.num_requests} requests (prompts 32-512 tokens, 128 "
            "generated, greedy, ignore_eos); each run its own token ids (no prefix-cache hit "
            "across runs), a warm-up with ids of its own, guided and not, before the first",
            "guided_fraction": 1 / GUIDED_FRACTION_EVERY,
            "schema": SCHEMA,
            "rounds": args.rounds,
            "torch_threads": torch.get_num_threads(),
        },
        "runs": runs,
        "guided_over_unguided_generated_tok_s": ratio,
        # Guided rows end early while the unguided ones still run, so a guided run takes as many
        # steps for fewer tokens: its token rate is lower even at equal cost per step.
        "guided_over_unguided_step_time": step_ratio,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _guided_over_unguided(runs: list[dict[str, Any]], key: str) -> float | None:
    values = {g: [x[key] for x in runs if x["guided"] == g] for g in (False, True)}
    if not values[True] or not values[False]:
        return None
    return statistics.median(values[True]) / statistics.median(values[False])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/results/structured_outputs.json")
    parser.add_argument("--note", default="", help="recorded in the result (e.g. machine load)")
    args = parser.parse_args()
    llm = LLM(model=args.model)
    vocab = llm.engine.model_config.vocab_size

    def workload(content_seed: int) -> Workload:
        # The same prompt lengths, token ids of their own: no run finds another's prefix cached.
        return workload_a(vocab, num_requests=args.num_requests, content_seed=content_seed)

    warm_up = workload(1000)
    for guided in (True, False):
        run_once(llm, replace(warm_up, prompts=warm_up.prompts[:8]), guided, f"warm-{guided}")
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for guided in (True, False, False, True):
            runs.append(run_once(llm, workload(len(runs) + 1), guided, f"r{r}-{len(runs)}"))
            print(json.dumps(runs[-1]), flush=True)
            write_report(args, runs)  # after every run: a partial result survives an interruption
    report = write_report(args, runs)
    print(json.dumps({"ratio": report["guided_over_unguided_generated_tok_s"]}))


if __name__ == "__main__":
    main()
