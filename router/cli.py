"""`pagedock route`: the router's command line. A flag per RouterConfig field (dashes for
underscores), each also read from `PAGEDOCK_<NAME>` (a flag on the command line wins);
`--replica` repeats (env: PAGEDOCK_REPLICAS, comma-separated)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from typing import Any

from engine.cli import OptionSpec, option_specs
from engine.errors import PagedockError
from router.config import RouterConfig

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    values = vars(ns)
    log_level = values.pop("log_level")
    try:
        config = RouterConfig(**values)
    except PagedockError as e:
        print(f"pagedock route: error: {e}", file=sys.stderr)
        return 2
    return run(config, log_level)


def run(config: RouterConfig, log_level: str = "info") -> int:
    import uvicorn

    from router.app import build_app
    from router.context import RouterContext

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)  # fmt: skip
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per proxied request otherwise
    try:
        ctx = RouterContext.from_config(config)
    except PagedockError as e:
        print(f"pagedock route: error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(build_app(ctx), host=config.host, port=config.port, log_config=None, log_level=log_level, access_log=False)  # fmt: skip
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagedock route",
        description="Route OpenAI-compatible requests to the engine replica that holds the "
        "request's cached KV blocks, balanced against load, with failover. Every option can "
        "also be set as an environment variable PAGEDOCK_<OPTION>.",
    )
    for spec in option_specs(RouterConfig):
        if spec.name == "replicas":
            env = os.environ.get("PAGEDOCK_REPLICAS", "")
            default = [u for u in env.split(",") if u.strip()]
            parser.add_argument("--replica", dest="replicas", action="append", default=None, metavar="URL", help=f"{spec.help} [env PAGEDOCK_REPLICAS]")  # fmt: skip
            parser.set_defaults(replicas=default)
            continue
        _add_option(parser, spec)
    parser.add_argument("--log-level", default=os.environ.get("PAGEDOCK_LOG_LEVEL", "info"), help="debug, info, warning or error")  # fmt: skip
    return parser


def _add_option(parser: argparse.ArgumentParser, spec: OptionSpec) -> None:
    flag = "--" + spec.name.replace("_", "-")
    env = "PAGEDOCK_" + spec.name.upper()
    default = _env_value(parser, spec, env)
    help_text = f"{spec.help.replace('%', '%%')} [env {env}; default {spec.default}]"
    if spec.kind is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)  # fmt: skip
    else:
        parser.add_argument(flag, type=spec.kind, default=default, help=help_text)


def _env_value(parser: argparse.ArgumentParser, spec: OptionSpec, env: str) -> Any:
    raw = os.environ.get(env)
    if raw is None:
        return None if spec.default is dataclasses.MISSING else spec.default
    if spec.kind is bool:
        if raw.strip().lower() not in _TRUE | _FALSE:
            parser.error(f"{env}={raw!r}: expected one of {sorted(_TRUE | _FALSE)}")
        return raw.strip().lower() in _TRUE
    try:
        return spec.kind(raw)
    except ValueError:
        parser.error(f"{env}={raw!r}: expected {spec.kind.__name__}")
