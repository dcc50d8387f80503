"""`pagedock download MODEL`: fetch a model into the cache the engine reads, then exit.

The operator runs it as a Job that fills a shared cache claim once per model revision; the engine
pods then mount that claim read-only and start with `HF_HUB_OFFLINE=1`. It fetches through the
engine's own resolver (pagedock/models/registry.py), so it downloads exactly the files `pagedock
serve` reads and checks them the same way. Torch-free.
"""

from __future__ import annotations

import argparse
import os
import sys

from pagedock.errors import PagedockError
from pagedock.models.registry import resolve_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagedock download", description=__doc__.splitlines()[0])
    parser.add_argument(
        "model", metavar="MODEL", help="hf://org/name[@revision] or a built-in name"
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="the hub cache to fill (sets HF_HUB_CACHE; default: $HF_HOME/hub)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.cache_dir:
        os.environ["HF_HUB_CACHE"] = args.cache_dir
    try:
        resolved = resolve_model(args.model)
    except PagedockError as e:  # the hub's answer, as a sentence: it becomes the Job's log
        print(f"pagedock download: error: {e}", file=sys.stderr)
        return 1
    print(f"pagedock download: {args.model} is in {resolved.path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
