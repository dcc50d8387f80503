"""`pagedock operator [run|crd]`: run the operator (kopf underneath) or print its CRD.

pagedock operator                      cluster-wide, or the namespaces in
                                       PAGEDOCK_OPERATOR_NAMESPACES
pagedock operator run -n team-a -n team-b --verbose
pagedock operator run -A --standalone  one replica, no leader election
pagedock operator crd [--peering]      the CRD YAML (with kopf's peering CRDs)
"""

import argparse
import os
import random
import re
import socket
import sys

from llm_operator.settings import OperatorSettings
from pagedock.options import OptionError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagedock operator", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="run the operator (the default)")
    add_run_arguments(run)
    crd = commands.add_parser("crd", help="print the LLMDeployment CRD as YAML")
    crd.add_argument("--peering", action="store_true", help="also kopf's peering CRDs")
    add_run_arguments(parser)
    return parser


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        default=None,
        help="watch this namespace (repeatable; exact names: no globs such as team-*)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        dest="clusterwide",
        help="watch every namespace",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--standalone", action="store_true", help="no leader election")
    parser.add_argument("--peering", dest="peering_name", default=None, help="peering name")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority; the highest active replica leads (default: random)",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "crd":
        from llm_operator.api.crd import crd_yaml

        sys.stdout.write(crd_yaml(peering=args.peering))
        return 0
    return run_operator(args)


def no_globs(not_names: list[str]) -> str:
    # NOTE: kopf matches globs against a namespace listing, which needs cluster-wide list/watch on
    # namespaces; the operator scans nothing (settings.scanning), so a glob would watch nothing.
    return (
        f"not a namespace name: {', '.join(not_names)} "
        "(globs are not supported: list the namespaces, or use -A)"
    )


def run_operator(args: argparse.Namespace) -> int:
    import kopf

    from llm_operator.controller.handlers import PEER_IDENTITY, make_registry

    try:
        settings = OperatorSettings.from_env()
    except OptionError as e:  # a bad PAGEDOCK_OPERATOR_* value: say which, no traceback
        print(f"pagedock operator: error: {e}", file=sys.stderr)
        return 2
    namespaces = tuple(args.namespaces or ()) or settings.namespaces
    not_names = [namespace for namespace in namespaces if not DNS_LABEL.fullmatch(namespace)]
    if not_names:
        print(f"pagedock operator: error: {no_globs(not_names)}", file=sys.stderr)
        return 2
    clusterwide = bool(args.clusterwide or not namespaces)
    settings = settings.with_overrides(namespaces=() if clusterwide else namespaces)
    peering_name = args.peering_name or settings.peering_name
    standalone = bool(args.standalone or not peering_name)
    kopf.configure(
        verbose=args.verbose or settings.log_level == "DEBUG",
        quiet=settings.log_level in {"WARNING", "ERROR"},
    )
    liveness = (
        f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    )
    # NOTE: kopf's identity is ours to choose; the resync pass needs it to find itself among peers.
    identity = f"{socket.gethostname()}/{os.getpid()}/{random.randrange(16**6):06x}"
    kopf.run(
        registry=make_registry(settings),
        identity=identity,  # type: ignore[arg-type]
        memo=kopf.Memo({PEER_IDENTITY: identity}),
        clusterwide=clusterwide,
        namespaces=settings.namespaces,
        standalone=standalone,
        # NOTE: a peering name makes kopf's peering mandatory: without its CRD every watch pauses,
        # silently, even in standalone mode; so standalone passes none.
        peering_name=None if standalone else peering_name,
        # NOTE: equal priorities would make replicas run side by side; a random one elects a leader.
        priority=args.priority if args.priority is not None else random.randrange(1, 2**15),
        liveness_endpoint=liveness,
    )
    return 0
