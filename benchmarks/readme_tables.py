"""Rewrites the README's benchmark tables from the committed result files.

    python benchmarks/readme_tables.py [--readme README.md] [--check]

Each table sits between two marker comments that name its result file:

    <!-- bench-table: offline_vs_vllm.json -->
    ... (generated: do not edit) ...
    <!-- /bench-table -->

and is rendered from that JSON file under benchmarks/results/, with a line naming the file, so
every figure in the README comes from a committed result. --check exits 1 when the README is out
of date.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import offline_vs_vllm, online_report, prefix_caching_online, router_report
from benchmarks.comparison_report import markdown_table, ratio_lines

RESULTS = Path(__file__).resolve().parent / "results"
MARKED = re.compile(
    r"(<!-- bench-table: (?P<file>[\w.-]+\.json) -->\n)(?P<body>.*?)(<!-- /bench-table -->)",
    re.DOTALL,
)


def render_offline(result: dict[str, Any]) -> str:
    table = markdown_table(result["summary"], offline_vs_vllm.COLUMNS)
    return f"{offline_vs_vllm.header_line(result)}\n\n{table}\n\n{ratio_lines(result['ratios'])}"


def render_online(result: dict[str, Any]) -> str:
    return online_report.online_markdown(result, result["summary"], result["ratios"]).strip()


def render_prefix_caching(result: dict[str, Any]) -> str:
    table = markdown_table(result["summary"], prefix_caching_online.COLUMNS)
    return (
        f"{prefix_caching_online.header_line(result)}\n\n{table}\n\n{ratio_lines(result['ratios'])}"
    )


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "offline_vs_vllm.json": render_offline,
    "online_vs_vllm.json": render_online,
    "prefix_caching_online.json": render_prefix_caching,
    "router_smollm2.json": lambda result: router_report.markdown(result).strip(),
}


def render_file(name: str, results: Path = RESULTS) -> str:
    """The text between the markers of `name`: a line naming the file, then its tables."""
    if name not in RENDERERS:
        raise ValueError(f"no renderer for {name}; known: {', '.join(RENDERERS)}")
    path = results / name
    if not path.exists():
        return f"(`benchmarks/results/{name}` not measured yet: run `make bench`)\n"
    body = RENDERERS[name](json.loads(path.read_text()))
    return f"From `benchmarks/results/{name}`:\n\n{body}\n"


def rewrite(readme: str, render: Callable[[str], str]) -> str:
    """`readme` with the text between each pair of markers replaced by `render(file name)`."""
    return MARKED.sub(lambda m: m.group(1) + render(m.group("file")) + m.group(4), readme)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=RESULTS.parents[1] / "README.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale")
    args = parser.parse_args()
    before = args.readme.read_text()
    after = rewrite(before, render_file)
    if not MARKED.search(before):
        raise SystemExit(f"{args.readme}: no <!-- bench-table: FILE.json --> markers")
    if args.check:
        raise SystemExit(0 if after == before else f"{args.readme}: benchmark tables are stale")
    args.readme.write_text(after)
    print(f"{args.readme}: {len(MARKED.findall(before))} benchmark tables rewritten")


if __name__ == "__main__":
    main()
