"""The command line of the SmolLM2 router scenario (benchmarks/router_smollm2.py): the workload's
shape, the peak and open-loop load, and the checks on them."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.router_workload import WorkloadShape

MODEL = "smollm2-135m-instruct"
POLICIES = ("prefix-aware", "round-robin", "least-loaded")
# Arguments that count something: each must be at least 1.
_COUNTS = (
    "tenants",
    "conversations",
    "turns",
    "system_prompt_tokens",
    "max_tokens",
    "peak_requests",
    "peak_concurrency",
    "calibration_hits",
)


def parse_args(argv: list[str] | None, description: str | None) -> argparse.Namespace:
    """The scenario's arguments; description is the --help text (the scenario's docstring)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=MODEL, choices=[MODEL])
    _add_workload_args(parser)
    _add_load_args(parser)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", type=Path, help="result path stem (default benchmarks/results/router_smollm2)"
    )
    args = parser.parse_args(argv)
    _check_args(parser, args)
    return args


def _add_workload_args(parser: argparse.ArgumentParser) -> None:
    """The workload's shape (benchmarks/router_workload.py), defaulting to WorkloadShape's."""
    shape = WorkloadShape()
    parser.add_argument("--tenants", type=int, default=shape.num_tenants)
    parser.add_argument(
        "--conversations", type=int, default=shape.conversations_per_tenant, help="per tenant"
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=shape.turns_per_conversation,
        help="user turns per conversation",
    )
    parser.add_argument("--system-prompt-tokens", type=int, default=shape.system_prompt_tokens)
    parser.add_argument("--max-tokens", type=int, default=24, help="output tokens per request")


def _add_load_args(parser: argparse.ArgumentParser) -> None:
    """The closed-loop peak, the open-loop load offered each policy, and the goodput target."""
    parser.add_argument("--peak-requests", type=int, default=64)
    parser.add_argument(
        "--peak-concurrency",
        type=int,
        default=8,
        help="closed loop: in flight at once (both replicas busy)",
    )
    parser.add_argument(
        "--load",
        type=float,
        default=0.8,
        help="open-loop arrival rate as a fraction of the measured peak",
    )
    parser.add_argument("--calibration-hits", type=int, default=5)
    parser.add_argument(
        "--ttft-target-ms", type=float, help="goodput target (default: 2x the unloaded hit TTFT)"
    )


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in _COUNTS:
        if getattr(args, name) < 1:
            parser.error(
                f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}"
            )
    if not 0 < args.load <= 1:
        parser.error(f"--load is a fraction of the peak in (0, 1], got {args.load}")
    if unknown := set(args.policies.split(",")) - set(POLICIES):
        parser.error(
            f"--policies: unknown {', '.join(sorted(unknown))} (choose from {', '.join(POLICIES)})"
        )
