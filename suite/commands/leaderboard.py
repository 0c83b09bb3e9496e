"""`python -m suite leaderboard [ROOT]`: tables, profile and plots from the result files under ROOT."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from suite.errors import SuiteError


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
    p.add_argument(
        "--headline",
        metavar="README",
        help="also write the tuned board's answer (three lines, a table of methods x cells, a figure) between the "
        "headline markers of README (leaderboards/README.md); while ROOT does not exist yet, say the board is "
        "being re-run",
    )


def run(args) -> int:
    from suite.leaderboard import default_out, generate, terminal_summary
    from suite.leaderboard.headline import check_readme, write_headline

    out = default_out(args.root) if args.out is None else Path(args.out)
    if args.headline:
        check_readme(Path(args.headline))  # before the board is written
        if not Path(args.root).is_dir():  # the headline board's runs have not landed yet
            write_headline(args.headline, None, headline_command(args, out))
            print(f"no runs under {args.root} yet: {args.headline} says the board is being re-run", file=sys.stderr)
            return 0
        if not (Path(args.root) / "tuning.json").is_file():
            raise SuiteError(f"--headline states a tuned board's answer, and {args.root} has no tuning.json")
    written = generate(args.root, out, tau_max=args.tau_max, untuned=tuple(args.untuned))
    print(f"{len(written)} files written to {out}", file=sys.stderr)
    if args.headline:
        write_headline(args.headline, out, headline_command(args, out))
        print(f"the headline of {out} written into {args.headline}", file=sys.stderr)
    print("\n".join(terminal_summary(out, written)))
    print(out / "index.md")
    return 0


def headline_command(args, out: Path) -> str:
    """This command as the headline records it, to be run again as the board's runs land."""
    parts = ["python -m suite leaderboard", os.path.normpath(args.root), "--out", os.path.normpath(out)]
    parts += [] if args.tau_max is None else ["--tau-max", f"{args.tau_max:g}"]
    parts += [f"--untuned {os.path.normpath(root)}" for root in args.untuned]
    return " ".join([*parts, "--headline", os.path.normpath(args.headline)])
