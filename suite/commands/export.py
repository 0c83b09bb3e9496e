"""`python -m suite export ROOT`: every run under ROOT as one table, its curves in long format."""

from __future__ import annotations

import sys
from pathlib import Path


def add(sub) -> None:
    p = sub.add_parser(
        "export",
        help="every run under ROOT as one table (CSV, parquet), its curves in long format",
        description="Read every result.json under ROOT and write runs.csv / runs.parquet (one row per "
        "run: the spec flattened into columns, the result's scalar fields beside them) and "
        "curves.csv / curves.parquet (run, step, metric, value), and probes.csv / probes.parquet "
        "(number-probe scores per run, data and layer) when there are probe runs. Prints the files written.",
    )
    p.add_argument("root", help="directory searched recursively for result.json")
    p.add_argument(
        "--out",
        help="where the tables go (default ROOT/export); a table there that no export wrote is never overwritten",
    )


def run(args) -> int:
    from suite.results.export import export

    out = Path(args.out) if args.out else Path(args.root) / "export"
    written, runs, curves = export(args.root, out)
    print(f"{len(runs)} runs and {len(curves)} curve points written to {out}", file=sys.stderr)
    print("\n".join(map(str, written)))
    return 0
