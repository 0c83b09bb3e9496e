"""`python -m suite status FILE`: done / running / failed / interrupted / missing, per cell of a grid file;
of a tuned grid, where each cell's search stands, then its tuning runs drawn so far."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser("status", help="done / running / failed / interrupted / missing, per cell of a grid file")
    p.add_argument("grid_file")
    flags.root(p)
    p.add_argument("--all", action="store_true", help="also list the cells that are done")
    flags.experiment(p)


def run(args) -> int:
    from suite.launch import grid

    g = grid.load(args.grid_file, args.root).only(args.experiment)
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise SuiteError(f"{args.root} is not a folder of runs")
    cells = g.cells
    if g.tuning is not None:  # its runs are the searches' trials (as far as drawn) and the chosen points'
        from suite.launch.spaces import parse
        from suite.launch.tuning import progress, tuning_cells

        tuning = parse(g.tuning, str(g.path), g.name)
        for line in progress(g, tuning, Path(args.root)):
            print(line)
        cells = tuning_cells(g, tuning, Path(args.root) / "tuning")
    for line in status_lines(cells, args.root, show_done=args.all):
        print(line)
    return 0


def status_lines(cells: list, root: str | Path, show_done: bool = False) -> list[str]:
    """One line per cell (done ones only if asked), then the counts."""
    from suite.results.result import headline
    from suite.results.rundir import STATUSES, RunDir, read_json

    lines, counts = [], dict.fromkeys(STATUSES, 0)
    for cell in cells:
        rd = RunDir(cell.run_dir)
        status = rd.status()
        counts[status] += 1
        if status == "done" and not show_done:
            continue
        line = f"{status:<11} {rd.path}  [{cell.label}]"
        if status == "done":
            line += f"  {headline(read_json(rd / 'result.json'))}".rstrip()
        elif status == "failed":
            failure = rd.read_failure() or {}
            message = (str(failure.get("message", "")).splitlines() or [""])[0]
            line += f"  {failure.get('error', '?')}: {message}"
        lines.append(line)
    lines.append(f"{len(cells)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s == "done"))
    if cells and counts["missing"] == len(cells):
        print(
            f"none of them has a run folder under {root}: if the grid ran elsewhere, pass that --root", file=sys.stderr
        )
    return lines
