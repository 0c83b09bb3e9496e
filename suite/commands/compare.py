"""`python -m suite compare A [B]`: two result roots, or two methods of one root, side by side with
intervals and verdicts (suite/leaderboard/compare.py)."""

from __future__ import annotations

from pathlib import Path


def add(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="two result roots (two commits, two machines), or two methods or two cells of one root: each side's "
        "time to target, the speed-up of B over A with its interval, p-value and verdict",
        description="Two roots: each cell's method in A meets the same method in B. One root: --a and --b "
        "filters say which methods are A and which B (e.g. --a opt.name=adam --b opt.name=adamlr), or, on a "
        "cell's settings, which cells (--a model.embed_init=0.03 --b model.embed_init=1: each method against "
        "itself in the cell that differs only there). Prints a markdown table; --out also writes compare.md "
        "and compare.csv.",
    )
    p.add_argument("root_a", help="a directory searched recursively for result.json")
    p.add_argument("root_b", nargs="?", help="another (default: root_a, with --a / --b telling the methods apart)")
    p.add_argument("--a", action="append", default=[], metavar="KIND.KEY=VALUE", help="keep these runs on side A")
    p.add_argument("--b", action="append", default=[], metavar="KIND.KEY=VALUE", help="keep these runs on side B")
    p.add_argument("--out", help="a directory for compare.md and compare.csv")


def run(args) -> int:
    from suite.leaderboard.compare import Side, compare, parse_where, to_markdown
    from suite.results.rundir import check_writable, writable_dir, write_atomic

    if args.out:
        check_writable(Path(args.out))  # before every run is read
    a = Side(Path(args.root_a), parse_where(args.a, "--a"))
    b = Side(Path(args.root_b or args.root_a), parse_where(args.b, "--b"))
    table = compare(a, b)
    markdown = to_markdown(table, a, b)
    if args.out:
        out = writable_dir(Path(args.out))
        write_atomic(out / "compare.csv", table.to_csv(index=False))
        write_atomic(out / "compare.md", markdown + "\n")
    print(markdown)
    return 0
