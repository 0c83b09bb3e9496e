"""One run of a stack: its data, model, batches, and its run folder from claim to result.

A Member is a built run (suite.build: data, model, sampler and generator, everything its seed fixes)
that claims its run folder (lock it, read where its checkpoint stands), records every evaluation
(metrics.jsonl, tracker, milestones), saves its checkpoints, and finishes (result.json, written
last). The stack it trains in (suite/engine/stack.py) only computes; what reaches the disk goes
through here, in the format of a separate run whatever the stack.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import TextIO

import torch

import suite
from suite.engine.build import Built
from suite.engine.chance import ChanceWatch
from suite.engine.milestones import Milestones
from suite.errors import SuiteError
from suite.results import weights
from suite.results.result import TRAIN
from suite.results.rundir import CODE, RunDir, UnreadableFile, read_json, write_json
from suite.specs.cell import Cell
from suite.specs.code import code_of
from suite.specs.config import TrainConfig
from suite.specs.contracts import Tracker

WRITERS = 16  # threads that write members' files at once (write_all)


@dataclass
class Member(Built):
    """A built run (suite/engine/build.py: its spec, data, model, batches) as it trains in a stack:
    its run folder, what it has recorded, where it stopped."""

    cell: Cell | None = None  # what it was asked to run: its run folder, tracker, grid and experiment
    run_dir: RunDir | None = None  # the cell's run folder, locked once claimed
    state: dict | None = None  # the checkpoint it resumes from (None: step 0)
    history: list[dict] = field(default_factory=list)  # its evaluations before that checkpoint
    milestones: Milestones | None = None
    chance: ChanceWatch | None = None  # where it fell back to chance after memorizing (suite/engine/chance.py)
    metrics_file: TextIO | None = None  # the open metrics.jsonl
    record: dict | None = None  # the last evaluation
    result: dict | None = None  # set once it stops (target held, diverged, budget), or found finished
    diverged: bool = False  # its loss or parameters stopped being finite
    notes: list[str] = field(default_factory=list)  # milestones reached since the last progress line

    @classmethod
    def of(cls, built: Built) -> Member:
        """The built run as a member, before it claims a run folder (its optimizer and filter are
        its stack's: suite/engine/updates.py)."""
        member = cls(**{f.name: getattr(built, f.name) for f in fields(Built)})
        member.milestones = Milestones(member.cfg.memorization, member.cfg.target, member.cfg.hold)
        member.chance = ChanceWatch(member.data.n_classes)
        return member

    @property
    def cfg(self) -> TrainConfig:
        return self.spec.train

    @property
    def start(self) -> int:
        return int(self.state["step"]) if self.state else 0

    @property
    def wall_before(self) -> float:
        """Its share of the wall time before a resume."""
        return float(self.state["wall_s"]) if self.state else 0.0

    # --- the run folder ------------------------------------------------------------------------

    @property
    def tracker(self) -> Tracker | None:
        return self.cell.tracker

    def claim(self, cell: Cell) -> None:
        """Lock the cell's run folder and read where it stands: finished (result set), or resumed from
        its checkpoint (its model, sampler and generator restored), or from step 0. Writes nothing."""
        self.cell, self.run_dir = cell, RunDir(cell.run_dir)
        self.run_dir.lock()
        if self.run_dir.finished:  # by another process meanwhile
            self.result = read_json(self.run_dir / "result.json")
            self.run_dir.unlock()
            return
        self.run_dir.clean_temporary()  # left by a process killed while writing
        self.state = self.run_dir.load_checkpoint(self.data.x_train.device)
        if self.state and self.state.get("run_id", self.spec.id) != self.spec.id:
            raise UnreadableFile(
                f"the checkpoint in {self.run_dir.path} is run {self.state['run_id']}'s (seed "
                f"{self.state.get('seed')}), not this run's ({self.spec.id}, seed "
                f"{self.spec.seed}); delete it to run this one from step 0"
            )
        self.history = [r for r in self.run_dir.read_metrics() if r["step"] < self.start]
        if self.state:
            try:
                self.model.load_state_dict(self.state["model"])
                self.sampler.load_state_dict(self.state["sampler"])
                self.generator.set_state(self.state["generator"].cpu())
            except Exception as err:  # noqa: BLE001 - it was read, but it is not this run's: any failure says so
                raise self.foreign(err) from None
        self._check_history()

    def _check_history(self) -> None:
        """The evaluations before the checkpoint are all there: one every eval_every steps from 0."""
        expected = list(range(0, self.start, self.cfg.eval_every))
        steps = [r["step"] for r in self.history]
        if steps != expected:
            missing = sorted(set(expected) - set(steps))
            raise UnreadableFile(
                f"{self.run_dir / 'metrics.jsonl'} does not hold the evaluations its checkpoint (step "
                f"{self.start}) continues: {len(missing)} missing, the first at step "
                f"{missing[0] if missing else '?'}; delete the run folder to run it again from step 0"
            )

    def foreign(self, err: Exception) -> UnreadableFile:
        return UnreadableFile(
            f"the checkpoint in {self.run_dir.path} does not fit this run ({type(err).__name__}: "
            f"{(str(err).splitlines() or [''])[0]}); delete it to run it again from step 0"
        )

    def open(self) -> None:
        """Start writing: spec.json, and metrics.jsonl up to where it resumes (replayed into the milestones)."""
        spec = self.spec.to_json()
        write_json(self.run_dir / "spec.json", spec)
        write_json(self.run_dir / CODE, code_of(spec))  # what a later command checks before reusing it
        for record in self.history:
            self.milestones.update(record)
            self.chance.update(record, self.milestones.memorization_step is not None)
        self.record = self.history[-1] if self.history else None  # as a run never stopped holds it
        self.metrics_file = self.run_dir.restart_metrics(self.history)

    def write(self, record: dict) -> None:
        """One evaluation: metrics.jsonl, the tracker, the milestones (those just reached go to notes)."""
        before = (self.milestones.memorization_step, self.milestones.grok_step)
        self.milestones.update(record)
        self.record = record
        try:
            self.metrics_file.write(json.dumps(record) + "\n")
            self.metrics_file.flush()
        except OSError as err:  # a full disk: say which file
            raise OSError(err.errno, err.strerror, str(self.run_dir / "metrics.jsonl")) from None
        if self.tracker is not None:
            self.tracker.log(record, record["step"])
        self.notes += [
            what
            for what, was, now in (
                ("memorized", before[0], self.milestones.memorization_step),
                ("grokked", before[1], self.milestones.grok_step),
            )
            if was is None and now is not None
        ]
        if before[1] is not None and self.milestones.grok_step is None:
            self.notes.append(f"collapsed: val fell below half the target after grokking at step {before[1]}")
        if self.chance.update(record, self.milestones.memorization_step is not None):
            self.notes.append(
                f"train and val fell to chance at step {record['step']:,} (train loss {record['train_loss']:.3g})"
            )

    def keep_weights(self, step: int, state_dict) -> None:
        """At memorization, and where each streak at the target begins until one holds (finish()
        drops the last candidate if none did): train.keep_weights."""
        m = self.milestones
        if m.memorization_step == step:
            weights.save(self.run_dir.path, "memorization", state_dict(), step, self.spec.id)
        if m.held_since == step and m.grok_step in (None, step):
            weights.save(self.run_dir.path, "grok", state_dict(), step, self.spec.id)

    def save_checkpoint(self, state: dict) -> None:
        """Its evaluations reach the disk first (fsync): no crash can leave a checkpoint whose
        history was lost. The checkpoint names its run, so another run's is never resumed."""
        self.metrics_file.flush()
        os.fsync(self.metrics_file.fileno())
        self.run_dir.save_checkpoint(
            state
            | {"sampler": self.sampler.state_dict(), "generator": self.generator.get_state()}
            | {"run_id": self.spec.id, "seed": self.spec.seed}
        )

    def conclude(self, step: int, stop_reason: str, wall: float, how: dict) -> None:
        """Its result (its last finite evaluation, milestones, provenance), in memory: from here the
        race counts it finished (a trial whose rival concludes at this evaluation is judged against
        it); `finish` writes it."""
        record = self.record or dict.fromkeys(("train_acc", "val_acc", "train_loss", "val_loss"))  # diverged at once
        m = self.milestones
        spec = self.spec.to_json()
        self.result = {
            "spec": spec,
            "run_id": self.spec.id,
            "runner": TRAIN,
            "memorization_step": m.memorization_step,
            "grok_step": m.grok_step,  # held for train.hold steps (suite.engine.milestones)
            "delay": m.delay,
            "first_touch_step": m.first_touch_step,
            "collapsed": m.collapsed,
            "chance_step": self.chance.first_step,  # where train and val fell to chance after memorizing
            "best_val_acc": m.best_val_acc,
            "final_train_acc": record["train_acc"],
            "final_val_acc": record["val_acc"],
            "final_train_loss": record["train_loss"],
            "final_val_loss": record["val_loss"],
            "steps": step,
            "stop_reason": stop_reason,
            "wall_s": wall,  # in a stack, this member's share of its wall time
            "steps_per_s": step / wall if wall > 0 else None,
            **how,
            "task_info": self.data.info,
            "code": code_of(spec),  # the code each component was made by (suite/specs/code.py)
            "grid": self.cell.grid,
            "experiment": self.cell.experiment,
            "suite_version": suite.__version__,
            "torch_version": torch.__version__,
            "python": platform.python_version(),
        }

    def finish(self, final_weights: dict | None = None) -> None:
        """Write its concluded result to result.json, last, and close the run folder. Its evaluations
        reach the disk first: result.json says they are all there. (Its tracker is told after:
        `tell_tracker`.) A write that fails leaves it unfinished, as a preempted run is."""
        try:
            self.metrics_file.flush()
            os.fsync(self.metrics_file.fileno())
            self.metrics_file.close()
            if final_weights is not None:  # before result.json: a finished run has its weights
                weights.save(self.run_dir.path, "final", final_weights, self.result["steps"], self.spec.id)
            if self.result["grok_step"] is None:  # a streak that never held leaves no grok weights
                weights.drop(self.run_dir.path, "grok")
            write_json(self.run_dir / "result.json", self.result)
        except BaseException:
            self.result = None  # release() lets its run folder go
            raise
        self.run_dir.drop_checkpoints()
        self.run_dir.unlock()

    def tell_tracker(self) -> None:
        """The finished run's result to its tracker (W&B), from the main thread."""
        if self.tracker is not None:
            self.tracker.finish(self.result)

    def release(self) -> None:
        """Close and unlock the run folder (preempted: its checkpoint stays); one it never wrote to
        is left as it was found."""
        if self.metrics_file is not None:
            self.metrics_file.close()
            self.run_dir.unlock()
        elif self.run_dir is not None:
            self.run_dir.abandon()


def write_all(writes: list[Callable[[], None]]) -> None:
    """Run each member's writes (a call that writes one member's files, in its order) side by side in
    threads: a filesystem commits fsyncs that arrive together at once (64 files fsync'd one after
    another took 230-490 ms on a cloud disk, side by side 33 ms), so a stack's K runs open, checkpoint
    and finish in about the time of one. Every call completes; then the first failure is raised."""
    if len(writes) <= 1:
        for write in writes:
            write()
        return
    with ThreadPoolExecutor(min(len(writes), WRITERS), thread_name_prefix="writes") as pool:
        done = [pool.submit(write) for write in writes]
    for future in done:
        future.result()


def claim(members: list[Member], cells: list[Cell]) -> None:
    """Every member claims its cell's run folder: if one cannot (a damaged file, another process on
    it), the others let go. Writes nothing."""
    try:
        for m, cell in zip(members, cells):
            m.claim(cell)
    except SuiteError:
        for m in members:
            m.release()
        raise
