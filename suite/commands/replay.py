"""`python -m suite replay RUN_DIR...`: train recorded runs' first steps again and say whether every
measure comes out the same bits, so a reader can check a committed board on their own machine,
commit or kernels before trusting it (or find where they part: rounding that training amplifies,
or a change in what the code computes)."""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError
from suite.results.rundir import RunDir, UnreadableFile

NOT_COMPARED = {"step", "elapsed_s"}  # the clock differs on every machine
TRAJECTORY = ("train_", "val_")  # losses and accuracies: what the weights do, so the same bits mean the same training


def add(sub) -> None:
    p = sub.add_parser(
        "replay",
        help="train recorded runs' first steps again and compare every measure with what they logged",
        description="Train each run's spec and seed again, into a temporary folder, up to --steps (or the "
        "run's last logged step, if sooner), and compare every measure of metrics.jsonl at every step both "
        "logged. Prints one line a run: the same bits; or the same training (every loss and accuracy) with "
        "measures of the weights in other rounding; or the first loss or accuracy that differs and the largest "
        "relative difference; then where each was made (commit, CPU kernels). Exit 0: every run trained the "
        "same bits; 1: some did not; 2: bad input. The recorded runs are only read.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run folder (spec.json, metrics.jsonl)")
    p.add_argument("--steps", type=int, default=200, help="replay this many update steps (default 200)")
    flags.device(p)


def run(args) -> int:
    from suite.engine.train import resolve_device

    if args.steps < 1:
        raise SuiteError(f"--steps takes a positive number of steps, got {args.steps}")
    device = resolve_device(args.device)
    plans = [_plan(Path(d), args.steps) for d in args.run_dirs]  # every folder checked before any training
    differs = 0
    for i, (run_dir, spec, recorded) in enumerate(plans, 1):
        print(f"replaying {i} of {len(plans)}: {run_dir}, {spec['train']['steps']:,} steps", file=sys.stderr)
        replayed, made = _replay(spec, device)
        same, said = agreement(recorded, replayed)
        differs += not same
        print(f"{run_dir}: {said}")
        print(f"    {made_where(RunDir(run_dir).read_result())}; replayed {made_where(made)}")
    if len(plans) > 1:
        print(f"{len(plans) - differs} of {len(plans)} runs trained the same bits")
    return 1 if differs else 0


def _plan(run_dir: Path, steps: int) -> tuple[Path, dict, dict[int, dict]]:
    """The spec to replay (the run's own, its budget cut to what it logged) and its recorded rows."""
    from suite.commands.run import like
    from suite.specs.spec import resolve, runs_loaded_code

    where = f"replay {run_dir}"
    choices, settings, seed = like(str(run_dir), {}, {}, flag="replay")
    if not (run_dir / "metrics.jsonl").is_file():
        raise SuiteError(f"{where}: no metrics.jsonl there (a run folder logs one from its first evaluation)")
    try:
        recorded = by_step(RunDir(run_dir).read_metrics())
    except UnreadableFile as err:
        raise SuiteError(f"{where}: {err}") from None
    if not recorded:
        raise SuiteError(f"{where}: its metrics.jsonl holds no logged step")
    last = max((s for s in recorded if s <= steps), default=None)
    if last is None or last == 0:
        raise SuiteError(f"{where}: it logged no step after 0 within {steps:,} steps; replay more --steps")
    spec = resolve(choices, settings | {"train.steps": last}, seed)
    if from_file := runs_loaded_code(spec):
        raise SuiteError(
            f"{where}: its spec.json sets {from_file[0]} = true, which runs the code of the model's folder; "
            f"replay only what you trust, with `suite run --like {run_dir} --set {from_file[0]}=true`"
        )
    return run_dir, spec, {s: row for s, row in recorded.items() if s <= last}


def _replay(spec: dict, device) -> tuple[dict[int, dict], dict | None]:
    from suite.launch.manifest import execute
    from suite.specs.cell import Cell

    with tempfile.TemporaryDirectory(prefix="suite-replay-") as tmp:
        run_dir = Path(tmp) / "run"
        [result] = execute([Cell(spec, run_dir)], device)
        return by_step(RunDir(run_dir).read_metrics()), result


def by_step(rows: list[dict]) -> dict[int, dict]:
    """metrics.jsonl's rows by step (a step logged twice, as by a resumed run, keeps its last row)."""
    return {row["step"]: row for row in rows}


def agreement(recorded: dict[int, dict], replayed: dict[int, dict]) -> tuple[bool, str]:
    """Whether the replay trained the same bits (its losses and accuracies are the record's at every
    step), and what to say: the first difference and the largest; measures computed from the weights
    (norms, sigma_max) can part in their last bits where the training did not (a stack measures its
    members together), and are reported apart."""
    gaps = {True: [], False: []}  # trajectory or not -> (step, key, recorded, replayed, relative gap)
    for step in sorted(recorded):
        if step not in replayed:
            return False, f"differs from step {step:,}: the replay logged no such step (it stopped sooner)"
        for key in sorted(recorded[step].keys() - NOT_COMPARED):
            then, now = recorded[step][key], replayed[step].get(key)
            if then != now and not (_number(then) and _number(now) and math.isnan(then) and math.isnan(now)):
                gap = abs(now - then) / max(abs(then), abs(now)) if _number(then) and _number(now) else math.inf
                gaps[key.startswith(TRAJECTORY)].append((step, key, then, now, gap))
    span = f"steps 0-{max(recorded):,} ({len(recorded)} evaluations)"
    largest = lambda found: max(found, key=lambda g: g[4])  # noqa: E731
    if found := gaps[True]:
        step, key, then, now, _ = found[0]
        worst = largest(found)
        return False, (
            f"differs from step {step:,}: {key} {then!r} recorded, {now!r} replayed; largest relative difference "
            f"{worst[4]:.1e} ({worst[1]} at step {worst[0]:,}), over {span}"
        )
    if found := gaps[False]:
        worst = largest(found)
        return True, (
            f"trained the same bits at {span}; measures of the weights differ by up to {worst[4]:.1e} "
            f"({worst[1]} at step {worst[0]:,}), the same weights measured with other rounding"
        )
    return True, f"the same bits at {span}, every measure"


def made_where(result: dict | None) -> str:
    """Where a run was made, as far as its result.json says: commit, device, CPU kernels, stack size."""
    if not result:
        return "where not recorded (no result.json)"
    from suite.results.result import stack_size

    commit = (result.get("git_commit") or "unknown commit")[:8] + ("+" if result.get("git_dirty") else "")
    device = result.get("device_name") or result.get("device") or "unknown device"
    kernels = result.get("cpu_capability") or "not recorded"
    stack = stack_size(result)
    return f"at {commit} on {device}, kernels {kernels}" + (f", in a stack of {stack}" if stack > 1 else "")


def _number(value) -> bool:
    return isinstance(value, float)
