"""`pagedock serve`: a flag per EngineConfig and ServerOptions field (same names, dashes for
underscores), each also read from `PAGEDOCK_<NAME>` (a flag on the command line wins), as
containers expect (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING too, where its pagedock variable is
unset). Imports no torch until the server starts, so `--help` is quick."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from engine.config import EngineConfig
from engine.server.openai.context import ServerOptions
from engine.server.openmp_wait import default_wait_policy
from pagedock.errors import PagedockError
from pagedock.options import add_options, values_for

ENV_PREFIX = "PAGEDOCK_"
VLLM_LORA_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagedock serve",
        description="Serve a model with an OpenAI-compatible API (chat, completions, streaming), "
        "plus /health, /metrics, /tokenize and the KV event stream for routers. Every option "
        f"can also be set as an environment variable {ENV_PREFIX}<OPTION> (e.g. "
        f"{ENV_PREFIX}PORT=9000); booleans take 1/true/yes/on or 0/false/no/off.",
    )
    parser.add_argument(
        "model_arg", nargs="?", metavar="MODEL", help="same as --model (a positional shorthand)"
    )
    environ = with_vllm_env(os.environ)
    add_options(parser, EngineConfig, ENV_PREFIX, title="model and engine", environ=environ)
    add_options(parser, ServerOptions, ENV_PREFIX, title="server", environ=environ)
    return parser


def with_vllm_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment, with the vLLM variables pagedock honours read as their pagedock
    equivalents where those are unset: VLLM_ALLOW_RUNTIME_LORA_UPDATING, which vLLM takes as on
    for 1 or true (any case) and as off for anything else."""
    env = dict(environ)
    vllm = env.get(VLLM_LORA_UPDATING_ENV)
    if vllm is not None:
        on = vllm.strip().lower() in ("1", "true")
        env.setdefault(f"{ENV_PREFIX}ALLOW_RUNTIME_LORA_UPDATING", "true" if on else "false")
    return env


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if ns.model_arg:
        ns.model = ns.model_arg
    try:
        config = EngineConfig(**values_for(EngineConfig, ns))
        options = ServerOptions(**values_for(ServerOptions, ns))
        default_wait_policy(os.environ)  # before torch loads OpenMP
        from engine.server.serve import run_server  # torch, fastapi: only once the flags are good
        from engine.startup_stages import mark_stage

        mark_stage("imports_done")
        return run_server(config, options)
    except PagedockError as e:  # a bad flag, a model that won't load: say so, no traceback
        print(f"pagedock serve: error: {e}", file=sys.stderr)
        return 2
