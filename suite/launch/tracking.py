"""Weights & Biases tracking for a run: curves as they are evaluated, the result as the summary.

`--wandb off|offline|online` (default: WANDB_MODE if set, else online under a sweep agent, else
off). The usual environment variables apply: WANDB_PROJECT (default "grokking-suite"),
WANDB_ENTITY, WANDB_DIR (where offline runs go), WANDB_API_KEY. On compute nodes without
network use offline, then `wandb sync <WANDB_DIR>/wandb/offline-run-*` from a machine that has it.

One W&B run per run folder: group = the problem (the cell without its method and seed, split as the
board splits a run: every method's seeds of one problem in one group), job_type = the method
(optimizer+filter+sampler; for a tuned grid's run, the method it was tuned as, so that tuned AdamW
and Grokfast's control differ), config = the full spec plus spec_id, cell_id, method, grid and
experiment. The summary holds the result's milestones, `grokked` and `time_to_target` as the board
counts it (the held grok step, or infinity when the run did not grok, with
`time_to_target_censored` true), `val_acc` keeps its maximum, and result.json, the curves
(metrics.jsonl) and their plot (curves.png: train and val accuracy against step) are logged as an
artifact. A number probe is a W&B run too (job_type = its task): per layer `numbers/rho`,
`numbers/pls_r2`, ... logged at step = layer, the layer with the best PLS R^2 and its scores in the
summary, and result.json, probe.csv and its plots as the artifact. A W&B workspace that reads like the leaderboard:
group by problem, color by job_type, chart val_acc against step, sort by time_to_target. The W&B run id is made at
the run's first start and kept in its run folder (wandb_id.txt), so a preempted and requeued run
goes on in the same W&B run (resume="allow"), while a fresh run of the same spec (another run
dir, or the same one removed and run again) gets its own. Under a sweep agent W&B takes the
agent's id instead, and that is the one kept. The runner starts W&B before
training, so its start-up (seconds) is not counted in the run's wall time. `suite track ROOT` logs
finished run folders (a committed board's, say) the same way after the fact, writing nothing into
them. The leaderboard never reads W&B: result.json is the record.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import os
import secrets
import string
import sys
from pathlib import Path

from suite.errors import SuiteError, missing_extra
from suite.results.rundir import check_writable, read_text, write_atomic
from suite.specs.spec import cell_id, spec_id

ID_FILE = "wandb_id.txt"
# Seconds W&B may take to reach its server before a run falls back to offline (SUITE_WANDB_INIT_TIMEOUT,
# read when a run starts): W&B's own default (90 s, then retries) would stall every run of a machine
# without network.
INIT_TIMEOUT_S = 15.0
_online_failed = False  # once online failed in this process, later runs go offline at once
MODES = ("off", "offline", "online")
SUMMARY_KEYS = (
    "memorization_step",
    "grok_step",
    "delay",
    "final_train_acc",
    "final_val_acc",
    "final_train_loss",
    "final_val_loss",
    "steps",
    "stop_reason",
    "wall_s",
    "steps_per_s",
    "device",
    "device_name",
    "first_touch_step",
    "collapsed",
    "chance_step",
    "best_val_acc",
)


# --wandb's modes, and WANDB_MODE's words for them
ALIASES = {
    "off": "off", "offline": "offline", "online": "online", "disabled": "off", "dryrun": "offline", "run": "online",
}  # fmt: skip


def default_mode() -> str:
    """--wandb's default, from WANDB_MODE (disabled -> off; online/run -> online); without it,
    online under a sweep agent (it sets WANDB_SWEEP_ID), whose sweep would otherwise see nothing,
    else off. A WANDB_MODE that is no mode is returned as it is, for mode_of to refuse: read as
    off, a misspelled "ofline" would turn tracking off without a word."""
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if not env:
        return "online" if os.environ.get("WANDB_SWEEP_ID") else "off"
    return ALIASES.get(env, env)


def mode_of(text: str) -> str:
    """--wandb's type (argparse applies it to the default from WANDB_MODE too): one of MODES."""
    if (mode := ALIASES.get(text.strip().lower())) is None:
        raise argparse.ArgumentTypeError(
            f"'{text}' (from --wandb or WANDB_MODE) is not one of {', '.join(MODES)} (WANDB_MODE may also "
            "say disabled, dryrun or run)"
        )
    return mode


def check_mode(mode: str) -> str:
    """mode, checked before anything runs or is written: one of MODES, and when it tracks, W&B
    installed and WANDB_DIR usable (W&B would log into a temporary folder instead, without a word)."""
    if mode not in MODES:
        raise SuiteError(f"--wandb takes {', '.join(MODES)}, got '{mode}'")
    if mode == "off":
        return mode
    if importlib.util.find_spec("wandb") is None:
        raise missing_extra(ModuleNotFoundError(name="wandb"))
    if wandb_dir := os.environ.get("WANDB_DIR"):
        try:
            check_writable(Path(wandb_dir))
        except SuiteError as err:
            raise SuiteError(f"WANDB_DIR: {err}") from None
    return mode


def kept_run_id(run_dir: str | Path) -> str:
    """The W&B run id of the run in run_dir: the one kept there by an earlier start, or a new one
    (8 characters of [a-z0-9], as W&B makes them)."""
    path = Path(run_dir) / ID_FILE
    if path.exists():
        return read_text(path).strip()
    return new_run_id()


def new_run_id() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def method(spec: dict) -> str:
    """The optimizer, filter and sampler by name, e.g. adamlr+none+random: one W&B config key to
    group or filter runs by method."""
    return "+".join(spec[kind]["name"] for kind in ("opt", "filter", "sampler"))


def job_type(spec: dict, grid: str | None, experiment: str | None) -> str:
    """W&B's job type: the method. A tuned grid's run belongs to the method it was tuned as (two
    methods may share an optimizer: tuned AdamW and Grokfast's control); any other run's method is
    its optimizer, filter and sampler."""
    if grid and grid.endswith(("-tuning", "-final")) and experiment:
        return experiment.removeprefix("tuning/")
    return method(spec)


def problem(spec: dict) -> str:
    """W&B's group: the problem a run was set, its cell without its method and seed, as the board
    splits a run (leaderboard/collect.py): every method's seeds of one problem share the group."""
    from suite.leaderboard.collect import problem_and_method, settings_key

    key = hashlib.sha256(repr(settings_key(problem_and_method(spec)[0])).encode()).hexdigest()[:10]
    return f"{spec['task']['name']}-{spec['model']['name']}-{key}"


def time_to_target(result: dict) -> dict:
    """Summary fields W&B can sort on, as the board counts them: the held grok step, or infinity for
    a run that did not grok (censored: `time_to_target_censored`)."""
    grokked = result.get("grok_step") is not None
    return {
        "grokked": grokked,
        "time_to_target": result["grok_step"] if grokked else math.inf,
        "time_to_target_censored": not grokked,
    }


def make_tracker(mode: str, cell):
    """A cell's tracker for train() or its task's own runner (the number probes), or None when tracking is off."""
    if check_mode(mode) == "off":
        return None
    return WandbTracker(mode, cell.spec, cell.run_dir, cell.grid, cell.experiment)


class WandbTracker:
    """What train() calls: log(record, step) per evaluation and finish(result) at the end."""

    def __init__(
        self,
        mode: str,
        spec: dict,
        run_dir: str | Path,
        grid: str | None = None,
        experiment: str | None = None,
        finished: bool = False,
    ):
        # finished: a run folder logged after the fact (`suite track`): nothing is written into it, and
        # its W&B id comes from its spec, so that logging it again updates the same W&B run
        self.mode, self.spec, self.run_dir, self.run, self.id_kept = mode, spec, Path(run_dir), None, finished
        self.finished = finished
        task, model = spec["task"]["name"], spec["model"]["name"]
        trains = "train" in spec  # else a task with its own runner: no optimizer, no curves
        opt = spec["opt"]["name"] if trains else "probe"
        tags = [task, model, *([opt, spec["sampler"]["name"]] if trains else []), f"seed{spec['seed']}"]
        if trains and spec["filter"]["name"] != "none":
            tags.append(spec["filter"]["name"])
        tags = list(dict.fromkeys(tags + [t for t in (grid, experiment) if t]))
        where = {"grid": grid, "experiment": experiment}
        self.init_args = dict(
            project=os.environ.get("WANDB_PROJECT") or "grokking-suite",
            group=problem(spec) if trains else cell_id(spec),
            job_type=job_type(spec, grid, experiment) if trains else task,
            tags=tags,
            config=spec
            | {
                "spec_id": spec_id(spec),
                "cell_id": cell_id(spec),
                "method": job_type(spec, grid, experiment) if trains else task,
            }
            | where,
            name=f"{task}-{model}-{opt}-s{spec['seed']}-{spec_id(spec)[:6]}",
            resume="allow",
            mode=mode,
            reinit="create_new",  # the members of a stack are several W&B runs open at once
        )

    def start(self) -> None:
        import wandb

        global _online_failed
        run_id = "r" + spec_id(self.spec)[:7] if self.finished else kept_run_id(self.run_dir)
        if self.init_args["mode"] == "online" and _online_failed:
            self.init_args["mode"] = "offline"
        try:
            timeout = float(os.environ.get("SUITE_WANDB_INIT_TIMEOUT", INIT_TIMEOUT_S))
            # a folder logged after the fact is one of hundreds (`suite track`): W&B's own ~35 lines a run
            # buried the one line track says of each
            settings = wandb.Settings(init_timeout=timeout, silent=self.finished)
            self.run = wandb.init(**self.init_args, id=run_id, settings=settings)
        except Exception as err:  # noqa: BLE001 - no network, no key, W&B down: the run goes on, logged offline
            if self.init_args["mode"] != "online":
                raise
            _online_failed = True
            self.init_args["mode"] = "offline"
            reason = (str(err).splitlines() or [""])[0][:160]
            print(
                f"warning: W&B online failed ({type(err).__name__}: {reason}); logging offline instead, to sync "
                "later with `wandb sync` from a machine with network",
                file=sys.stderr,
            )
            # the failed attempt keeps its id in W&B's service: the offline run takes a new one (kept from here on)
            self.run = wandb.init(**self.init_args, id=new_run_id())
        self.run.define_metric("val_acc", summary="max")
        # A sweep agent names its runs itself (W&B then ignores ours): keep the id W&B used.
        self.id_kept = self.finished or (self.run.id == run_id and (self.run_dir / ID_FILE).exists())

    def keep_id(self) -> None:
        """Write the W&B run's id into the run folder once the run is under way there (the loop has
        made the dir), so that bad input found while building still leaves nothing behind."""
        if not self.id_kept:
            write_atomic(self.run_dir / ID_FILE, self.run.id + "\n")
            self.id_kept = True

    def log(self, record: dict, step: int) -> None:
        if self.run is None:
            self.start()
        self.keep_id()
        if step < self.run.step:  # a resumed run replays a few evaluations W&B already has
            return
        self.run.log(record, step=step)

    def finish(self, result: dict) -> None:
        if self.run is None:
            self.start()
        self.keep_id()
        self.run.summary.update({k: result[k] for k in SUMMARY_KEYS if k in result})
        if "train" in self.spec:
            self.run.summary.update(time_to_target(result))
        else:
            self._log_probe(result)
        self._log_files()
        self.run.finish(exit_code=0)
        self.run = None

    def _log_probe(self, result: dict) -> None:
        """Each probed data's scores per layer (step = layer), and its best layer by PLS R^2 in the summary."""
        for data in ("numbers", "letters"):
            if not isinstance(result.get(data), dict):
                continue
            for row in result[data]["layers"]:
                scores = {f"{data}/{k}": v["mean"] for k, v in row.items() if isinstance(v, dict)}
                self.run.log(scores, step=row["layer"])
            best = result[data]["best"]["by_r2"]
            self.run.summary.update(
                {f"{data}/best_layer": best["layer"]}
                | {f"{data}/best_{k}": v["mean"] for k, v in best.items() if isinstance(v, dict)}
            )

    def _log_files(self) -> None:
        import tempfile

        import wandb

        artifact = wandb.Artifact(f"run-{spec_id(self.spec)}", type="result")
        for name in ("result.json", "metrics.jsonl", "probe.csv", "probe_layers.png", "probe_pc1.png"):
            if (self.run_dir / name).exists():
                artifact.add_file(str(self.run_dir / name), name=name)
        with tempfile.TemporaryDirectory() as tmp:  # the plot goes to W&B only: a run folder holds results
            if "train" in self.spec and (png := self._curves_png()) is not None:
                (Path(tmp) / "curves.png").write_bytes(png)
                artifact.add_file(str(Path(tmp) / "curves.png"), name="curves.png")
            self.run.log_artifact(artifact)

    def _curves_png(self) -> bytes | None:
        import pandas as pd

        from suite.leaderboard.plots import plot_accuracy
        from suite.results.rundir import RunDir

        records = RunDir(self.run_dir).read_metrics()
        if not records:
            return None
        return plot_accuracy(self.init_args["name"], [(method(self.spec), [pd.DataFrame(records)])])

    def close(self, exit_code: int) -> None:
        """End the W&B run after a preemption (3) or a crash (1); a finished run never gets here."""
        if self.run is None:
            return
        if exit_code == 3:
            self.run.mark_preempting()
        self.run.finish(exit_code=exit_code)
        self.run = None
