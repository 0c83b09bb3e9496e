"""Weights & Biases tracking for a run: curves as they are evaluated, the result as the summary.

`--wandb off|offline|online` (default: WANDB_MODE if set, else off). The usual environment
variables apply: WANDB_PROJECT (default "grokking-suite"), WANDB_ENTITY, WANDB_DIR (where
offline runs go), WANDB_API_KEY. On compute nodes without network use offline, then
`wandb sync <WANDB_DIR>/wandb/offline-run-*` from a machine that has it.

One W&B run per cell: group = grid/task/model, job_type = the optimizer, config = the full
spec, and an id derived from the cell id, so a preempted and requeued cell goes on in the same
W&B run (resume="allow"). The runner starts W&B before training, so its start-up (seconds) is
not counted in the run's wall time. The leaderboard never reads W&B: result.json is the record.
"""

from __future__ import annotations

import os

from suite.registry import SuiteError
from suite.spec import spec_id

MODES = ("off", "offline", "online")
SUMMARY_KEYS = ("memorization_step", "grok_step", "delay", "final_train_acc", "final_val_acc",
                "final_train_loss", "final_val_loss", "steps", "stop_reason", "wall_s", "steps_per_s", "device")


def default_mode() -> str:
    """--wandb's default, from WANDB_MODE (disabled -> off; online/run -> online)."""
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    return {"offline": "offline", "dryrun": "offline", "online": "online", "run": "online"}.get(env, "off")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise SuiteError(f"--wandb takes {', '.join(MODES)}, got '{mode}'")
    return mode


def run_id(spec: dict) -> str:
    """The W&B run id of a cell: its spec id, so every attempt at a cell lands in one W&B run."""
    return f"cell-{spec_id(spec)}"


def make_tracker(mode: str, spec: dict, grid: str | None = None, experiment: str | None = None):
    """A tracker for train(), or None when tracking is off or nothing is trained (a task with its
    own runner: its spec has no train settings and no curves)."""
    if check_mode(mode) == "off" or "train" not in spec:
        return None
    return WandbTracker(mode, spec, grid, experiment)


class WandbTracker:
    """What train() calls: log(record, step) per evaluation and finish(result) at the end."""

    def __init__(self, mode: str, spec: dict, grid: str | None = None, experiment: str | None = None):
        self.mode, self.spec, self.run = mode, spec, None
        task, model, opt = spec["task"]["name"], spec["model"]["name"], spec["opt"]["name"]
        tags = [task, model, opt, spec["sampler"]["name"], f"seed{spec['seed']}"]
        if spec["filter"]["name"] != "none":
            tags.append(spec["filter"]["name"])
        tags += [t for t in (grid, experiment) if t and t not in tags]
        self.init_args = dict(
            project=os.environ.get("WANDB_PROJECT") or "grokking-suite",
            group="/".join([grid or "run", task, model]),
            job_type=opt,
            tags=tags,
            config=spec,
            id=run_id(spec),
            name=f"{task}-{model}-{opt}-s{spec['seed']}-{spec_id(spec)[:6]}",
            resume="allow",
            mode=mode,
            reinit="create_new",  # the members of an ensemble are several W&B runs open at once
        )

    def start(self) -> None:
        import wandb

        self.run = wandb.init(**self.init_args)

    def log(self, record: dict, step: int) -> None:
        if self.run is None:
            self.start()
        if step < self.run.step:  # a resumed run replays a few evaluations W&B already has
            return
        self.run.log(record, step=step)

    def finish(self, result: dict) -> None:
        if self.run is None:
            self.start()
        self.run.summary.update({k: result[k] for k in SUMMARY_KEYS if k in result})
        self.run.finish(exit_code=0)
        self.run = None

    def close(self, exit_code: int) -> None:
        """End the W&B run after a preemption (3) or a crash (1); a finished run never gets here."""
        if self.run is None:
            return
        if exit_code == 3:
            self.run.mark_preempting()
        self.run.finish(exit_code=exit_code)
        self.run = None
