"""The `pagedock` command: serve / route / operator / bench.

Each subcommand imports what it needs only when it runs, so `pagedock operator` and
`pagedock route` never import torch. `serve` takes a flag for every EngineConfig and ServerOptions
field (same names, dashes for underscores), each also read from `PAGEDOCK_<NAME>` (a flag given on
the command line wins), as containers expect.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import inspect
import itertools
import os
import runpy
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

_OVERVIEW = """\
usage: pagedock <command> [options]

pagedock serves LLMs: a paged-attention engine with an OpenAI-compatible API, a prefix-aware
router, and a Kubernetes operator.

commands:
  serve      run the engine's OpenAI-compatible server (default model: SmolLM2-135M-Instruct)
  route      run the prefix-aware router in front of engine replicas
  operator   run the Kubernetes operator, or print its CRD
  bench      offline throughput benchmark (benchmarks/offline_throughput.py, from a checkout)

`pagedock <command> --help` describes each command's options.
"""
# Flags people know from vLLM for switching a default-on feature off.
_ALIASES = {
    "enable_prefix_caching": "--no-prefix-caching",
    "enable_chunked_prefill": "--no-chunked-prefill",
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
# The repository root, when running from a source checkout.
_CHECKOUT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_OVERVIEW)
        return 0 if args else 2
    commands: dict[str, Callable[[list[str]], int]] = {
        "serve": serve,
        "route": route,
        "operator": operator,
        "bench": bench,
    }
    command = commands.get(args[0])
    if command is None:
        print(f"pagedock: unknown command {args[0]!r}\n\n{_OVERVIEW}", file=sys.stderr)
        return 2
    return command(args[1:])


# ---- serve ----------------------------------------------------------------------------------


def serve(argv: list[str]) -> int:
    from engine.config import EngineConfig
    from engine.errors import PagedockError
    from engine.server.context import ServerOptions

    parser = build_serve_parser()
    ns = parser.parse_args(argv)
    values = vars(ns)
    if values.pop("model_arg", None):
        values["model"] = ns.model_arg
    engine_args = {f.name: values[f.name] for f in dataclasses.fields(EngineConfig)}
    server_args = {f.name: values[f.name] for f in dataclasses.fields(ServerOptions)}
    try:
        config = EngineConfig(**engine_args)
        from engine.server.serve import run_server

        return run_server(config, ServerOptions(**server_args))
    except PagedockError as e:  # a bad flag, a model that won't load: say so, no traceback
        print(f"pagedock serve: error: {e}", file=sys.stderr)
        return 2


def build_serve_parser() -> argparse.ArgumentParser:
    from engine.config import EngineConfig
    from engine.server.context import ServerOptions

    parser = argparse.ArgumentParser(
        prog="pagedock serve",
        description="Serve a model with an OpenAI-compatible API (chat, completions, streaming), "
        "plus /health, /metrics, /tokenize and the KV event stream for routers. Every option "
        "can also be set as an environment variable PAGEDOCK_<OPTION> (e.g. PAGEDOCK_PORT=9000).",
    )
    parser.add_argument(
        "model_arg", nargs="?", metavar="MODEL", help="same as --model (a positional shorthand)"
    )
    for title, cls in (("model and engine", EngineConfig), ("server", ServerOptions)):
        group = parser.add_argument_group(title)
        for spec in option_specs(cls):
            _add_option(parser, group, spec)
    return parser


@dataclasses.dataclass
class OptionSpec:
    name: str
    kind: type  # bool, int, float or str
    default: Any
    help: str


def option_specs(cls: type) -> list[OptionSpec]:
    """One flag per dataclass field: its type, default and attribute docstring."""
    hints = typing.get_type_hints(cls)
    docs = _field_docstrings(cls)
    specs = []
    for f in dataclasses.fields(cls):
        specs.append(
            OptionSpec(f.name, _scalar_type(hints[f.name]), f.default, docs.get(f.name, ""))
        )
    return specs


def _add_option(parser: argparse.ArgumentParser, group: Any, spec: OptionSpec) -> None:
    flag = "--" + spec.name.replace("_", "-")
    env = "PAGEDOCK_" + spec.name.upper()
    default = _env_default(parser, spec, env)
    suffix = f" [env {env}; default {spec.default}]"
    spec_help = spec.help.replace("%", "%%")  # argparse formats help with %
    if spec.kind is bool:
        group.add_argument(
            flag, action=argparse.BooleanOptionalAction, default=default, help=spec_help + suffix
        )
        if spec.name in _ALIASES:
            group.add_argument(
                _ALIASES[spec.name],
                dest=spec.name,
                action="store_false",
                help=f"same as --no-{flag[2:]}",
            )
        return
    word = spec.name.split("_")[-1].upper()
    metavar = {int: "N", float: "SECONDS" if "timeout" in spec.name else "X"}.get(spec.kind, word)
    group.add_argument(
        flag, type=spec.kind, default=default, metavar=metavar, help=spec_help + suffix
    )


def _env_default(parser: argparse.ArgumentParser, spec: OptionSpec, env: str) -> Any:
    raw = os.environ.get(env)
    if raw is None:
        return spec.default
    if spec.kind is bool:
        if raw.strip().lower() not in _TRUE | _FALSE:
            parser.error(f"{env}={raw!r}: expected one of {sorted(_TRUE | _FALSE)}")
        return raw.strip().lower() in _TRUE
    try:
        return spec.kind(raw)
    except ValueError:
        parser.error(f"{env}={raw!r}: expected {spec.kind.__name__}")


def _scalar_type(hint: Any) -> type:
    """int | None -> int; int | str | None -> str (the config parses strings such as '2GiB')."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return hint if hint in (bool, int, float, str) else str


def _field_docstrings(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass (how EngineConfig documents fields)."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for prev, node in itertools.pairwise(body):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = node.value.value.strip()
    return docs


# ---- the other commands, each imported only when it runs ------------------------------------


def operator(argv: list[str]) -> int:
    if not _importable("llm_operator.cli", _CHECKOUT / "operator"):
        print("pagedock operator: the operator is not installed in this build", file=sys.stderr)
        return 2
    from llm_operator.cli import main as operator_main

    return operator_main(argv)


def route(argv: list[str]) -> int:
    if not _importable("router.cli", _CHECKOUT):
        print("pagedock route: the router is not installed in this build", file=sys.stderr)
        return 2
    from router.cli import main as router_main  # type: ignore[import-not-found,unused-ignore]

    result: int = router_main(argv)
    return result


def _importable(module: str, checkout_dir: Path) -> bool:
    """Whether `module` can be imported; in a source checkout that was not pip-installed, its
    folder is put on sys.path first (as pytest's pythonpath does)."""

    def found() -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # the parent package is missing
            return False

    if found():
        return True
    if checkout_dir.is_dir() and str(checkout_dir) not in sys.path:
        sys.path.append(str(checkout_dir))
    return found()


def bench(argv: list[str]) -> int:
    script = Path.cwd() / "benchmarks" / "offline_throughput.py"
    if not script.exists():
        print(
            "pagedock bench: run it from a pagedock checkout (benchmarks/offline_throughput.py "
            "is not in this directory)",
            file=sys.stderr,
        )
        return 2
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
