"""`pagedock serve`: a flag per EngineConfig and ServerOptions field (same names, dashes for
underscores), each also read from `PAGEDOCK_<NAME>` (a flag on the command line wins), as
containers expect. Imports no torch until the server starts, so `--help` is quick."""

from __future__ import annotations

import argparse
import sys

from engine.config import EngineConfig
from engine.server.openai.context import ServerOptions
from pagedock.errors import PagedockError
from pagedock.options import add_options, values_for

ENV_PREFIX = "PAGEDOCK_"


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
    add_options(parser, EngineConfig, ENV_PREFIX, title="model and engine")
    add_options(parser, ServerOptions, ENV_PREFIX, title="server")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if ns.model_arg:
        ns.model = ns.model_arg
    try:
        config = EngineConfig(**values_for(EngineConfig, ns))
        options = ServerOptions(**values_for(ServerOptions, ns))
        from engine.server.serve import run_server  # torch, fastapi: only once the flags are good

        return run_server(config, options)
    except PagedockError as e:  # a bad flag, a model that won't load: say so, no traceback
        print(f"pagedock serve: error: {e}", file=sys.stderr)
        return 2
