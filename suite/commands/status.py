"""`python -m suite status FILE`: done / running / queued / failed / interrupted / missing, per cell of a
grid file (queued: an array task Slurm still holds, or a local grid or tune running now, will start
it); of a tuned grid, where each cell's search stands, then its tuning runs drawn so far and the final
runs of the searches that have chosen."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser(
        "status", help="done / running / queued / failed / interrupted / missing, per cell of a grid file"
    )
    p.add_argument("grid_file")
    flags.root(p)
    p.add_argument("--all", action="store_true", help="also list the cells that are done")
    flags.experiment(p)


def run(args) -> int:
    from suite.launch import grid, local
    from suite.launch.slurm import follow_ups, last_follow_up, queued

    g = grid.load(args.grid_file, args.root).only(args.experiment)
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise SuiteError(f"{args.root} is not a folder of runs")
    cells, root, roots = g.cells, Path(args.root), [Path(args.root)]
    if g.tuning is not None:  # its runs are the searches' trials (as far as drawn) and the chosen points'
        from suite.launch.spaces import parse
        from suite.launch.tuning import choices, final_cells, progress, tuning_cells

        tuning = parse(g.tuning, str(g.path), g.name)
        for line in progress(g, tuning, Path(args.root)):
            print(line)
        queued_follow_ups = _ask_slurm(follow_ups, root)
        for job in queued_follow_ups or ():
            print(f"follow-up job {job} is queued: it runs the tune again once its array jobs have ended")
        if queued_follow_ups == [] and (last := last_follow_up(root)) is not None:
            print(f"no follow-up job is queued; the last, {last[0]}, has ended: its log is {last[1]}")
        chosen = choices(g, tuning, root / "tuning")
        cells = tuning_cells(g, tuning, root / "tuning") + final_cells(g, tuning, chosen, root / "final")
        roots = [root / "tuning", root / "final"]
    held = set().union(*(local.queued(r) for r in roots))
    for r in roots:
        found = _ask_slurm(queued, r)
        if found is None:  # squeue could not answer: said once
            break
        held |= found
    for line in status_lines(cells, args.root, held, show_done=args.all):
        print(line)
    return 0


def _ask_slurm(question, root: Path):
    """question(root) of suite.launch.slurm (which runs an array task Slurm still holds will run, which
    follow-up jobs it holds); where squeue cannot answer, a warning, and None."""
    try:
        return question(root)
    except SuiteError as err:
        print(f"warning: {err}", file=sys.stderr)
        return None


def status_lines(cells: list, root: str | Path, held: set[Path] = frozenset(), show_done: bool = False) -> list[str]:
    """One line per cell (done ones only if asked), then the counts; a cell whose folder is in
    `held` and that is neither done nor running is queued."""
    from suite.launch.manifest import statuses
    from suite.results.result import headline
    from suite.results.rundir import STATUSES, RunDir, read_json

    lines, counts = [], dict.fromkeys(STATUSES[:2] + ("queued",) + STATUSES[2:], 0)
    for cell, status in zip(cells, statuses(cells, held)):
        rd = RunDir(cell.run_dir)
        counts[status] += 1
        if status == "done" and not show_done:
            continue
        line = f"{status:<11} {rd.path}  [{cell.label}]"
        if status == "done":
            line += f"  {headline(read_json(rd / 'result.json'))}".rstrip()
        elif status in ("running", "interrupted"):
            line += _latest(rd)
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


def _latest(rd) -> str:
    """How far a started run has got: its latest evaluation's step and val acc ("" before its first, or
    where its history cannot be read: the run says so itself when it resumes)."""
    from suite.results.rundir import UnreadableFile

    try:
        evaluations = rd.read_metrics()
    except UnreadableFile:
        return ""
    if not evaluations:
        return ""
    last = evaluations[-1]
    val = last.get("val_acc")
    return f"  at step {last['step']:,}" + (f", val acc {val:.3f}" if isinstance(val, int | float) else "")
