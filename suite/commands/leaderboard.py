"""`python -m suite leaderboard [ROOT]`: tables, profile and plots from the result files under ROOT."""

from __future__ import annotations

import sys
from pathlib import Path


def add(sub) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="tables (Markdown, CSV), performance profile and plots from result files",
        description="Read every result.json under ROOT and write leaderboards to --out; print "
        "their tables and the paths of their accuracy plots. The last stdout line "
        "is the path of the index.",
    )
    p.add_argument(
        "root", nargs="?", default="runs", help="directory searched recursively for result.json (default runs/)"
    )
    p.add_argument(
        "--out",
        help="where tables and plots go (default ROOT/leaderboard); a file there that "
        "an earlier leaderboard did not write is never overwritten",
    )
    p.add_argument("--tau-max", type=float, help="performance profile over tau in [1, TAU_MAX] (default 4, AlgoPerf's)")
    p.add_argument(
        "--untuned",
        action="append",
        default=[],
        metavar="DIR",
        help="(repeatable) a root of untuned runs: a tuned board's rows are checked against every untuned run "
        "of their family in an identical cell, and a row such a run beats gets no verdict (tuning failed)",
    )


def run(args) -> int:
    from suite.leaderboard import default_out, generate, terminal_summary

    out = default_out(args.root) if args.out is None else Path(args.out)
    written = generate(args.root, out, tau_max=args.tau_max, untuned=tuple(args.untuned))
    print(f"{len(written)} files written to {out}", file=sys.stderr)
    print("\n".join(terminal_summary(out, written)))
    print(out / "index.md")
    return 0
