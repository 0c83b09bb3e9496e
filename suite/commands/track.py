"""`python -m suite track ROOT --wandb offline|online`: finished run folders logged as W&B runs."""

from __future__ import annotations

import sys

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser(
        "track",
        help="log every finished run under ROOT (a committed board, say) as a W&B run",
        description="Log every finished run under ROOT as a W&B run, as if it had been tracked while it "
        "ran: its config, curves, summary and files, grouped by problem and typed by method as runs of "
        "today are, so that a dashboard holds committed baselines beside your own runs. Nothing is "
        "written into the run folders; logging a folder again updates the same W&B run.",
    )
    p.add_argument("root", help="directory searched recursively for result.json")
    flags.wandb(p)


def run(args) -> int:
    from suite.launch.tracking import WandbTracker, check_mode
    from suite.results.rundir import result_files

    if check_mode(args.wandb) == "off":
        raise SuiteError("track logs to W&B: give --wandb offline or --wandb online (or set WANDB_MODE)")
    files = result_files(args.root)
    if not files:
        raise SuiteError(f"{args.root}: no result.json under it")
    runs = []  # every folder read and checked before the first is logged: a damaged one stops the command whole
    for path in files:
        result, records = _checked(path)
        if result is None:
            print(f"skipped {path.parent}: not a trained run of this suite", file=sys.stderr)
        else:
            runs.append((path, result, records))
    for i, (path, result, records) in enumerate(runs, 1):
        tracker = WandbTracker(
            args.wandb, result["spec"], path.parent, result.get("grid"), result.get("experiment"), finished=True
        )
        tracker.start()
        for record in records:
            tracker.log(record, record["step"])
        tracker.finish(result)
        print(f"[{i}/{len(runs)}] logged {path.parent}", file=sys.stderr, flush=True)
    print(f"{len(runs)} runs logged to W&B ({args.wandb})", file=sys.stderr)
    return 0


def _checked(path):
    """(result, its evaluations) of a trained run's folder, (None, None) for another runner's; one
    line if the folder is damaged (a seed that is no integer, a grok step that is NaN, a history
    whose evaluations have no integer step)."""
    from suite.results.result import TRAIN, damage_of, has_full_spec, is_int, runner_of
    from suite.results.rundir import RunDir, read_json

    result = read_json(path)
    if not has_full_spec(result) or runner_of(result) != TRAIN:
        return None, None
    if damage := damage_of(result):
        raise SuiteError(f"{path}: {damage}; nothing was logged (move the folder aside to log the rest)")
    records = RunDir(path.parent).read_metrics()
    for record in records:
        if not (isinstance(record, dict) and is_int(record.get("step"))):
            raise SuiteError(
                f"{path.parent / 'metrics.jsonl'}: an evaluation has no integer step; nothing was logged "
                "(move the folder aside to log the rest)"
            )
    return result, records
