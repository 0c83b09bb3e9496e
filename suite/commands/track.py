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
    from suite.results.result import TRAIN, has_full_spec, runner_of
    from suite.results.rundir import RunDir, read_json, result_files

    if check_mode(args.wandb) == "off":
        raise SuiteError("track logs to W&B: give --wandb offline or --wandb online (or set WANDB_MODE)")
    files = result_files(args.root)
    if not files:
        raise SuiteError(f"{args.root}: no result.json under it")
    logged = 0
    for i, path in enumerate(files, 1):
        result = read_json(path)
        if not has_full_spec(result) or runner_of(result) != TRAIN:
            print(f"skipped {path.parent}: not a trained run of this suite", file=sys.stderr)
            continue
        tracker = WandbTracker(
            args.wandb, result["spec"], path.parent, result.get("grid"), result.get("experiment"), finished=True
        )
        tracker.start()
        for record in RunDir(path.parent).read_metrics():
            tracker.log(record, record["step"])
        tracker.finish(result)
        logged += 1
        print(f"[{i}/{len(files)}] logged {path.parent}", file=sys.stderr, flush=True)
    print(f"{logged} runs logged to W&B ({args.wandb})", file=sys.stderr)
    return 0
