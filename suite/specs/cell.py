"""A cell: one spec with its seed, and the run folder it writes. The one record every launcher
hands the training loop, whole: `suite run` makes one per seed, a grid file one per point of its
axes (suite/launch/grid.py), a tune one per trial and seed (suite/launch/tuning.py); a manifest stores them for
the processes that run them (suite/launch/manifest.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from suite.specs.spec import spec_id

# A grid's name, as a grid file or a board's tuning.json gives it: it names a folder (ROOT/grids/NAME),
# so it is one plain path part, never "..", "/tmp/x" or empty.
GRID_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Cell:
    spec: dict
    run_dir: Path
    label: str = ""  # the axis values that make it, e.g. "opt=adamlr c=4 seed=1"
    grid: str | None = None  # the grid and experiment that asked for it, recorded in its result
    experiment: str | None = None
    race: dict | None = None  # a tuning trial's run folders and its rivals' (suite/engine/race.py)
    tracker: object = field(default=None, compare=False)  # its W&B run (suite/launch/tracking.py), set as it runs

    @property
    def id(self) -> str:
        return spec_id(self.spec)

    @property
    def name(self) -> str:
        """How progress lines name it: its run folder, and its label where it has one."""
        return f"{self.run_dir} [{self.label}]" if self.label else str(self.run_dir)

    def under(self, root: str | Path) -> Cell:
        """The same cell with its run folder under another root."""
        from suite.specs.spec import default_run_dir

        return replace(self, run_dir=default_run_dir(self.spec, root))

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "run_dir": str(self.run_dir),
            "label": self.label,
            "grid": self.grid,
            "experiment": self.experiment,
            "race": self.race,
            "spec": self.spec,
        }

    @classmethod
    def from_json(cls, entry: dict) -> Cell:
        return cls(
            entry["spec"],
            Path(entry["run_dir"]),
            entry["label"],
            entry.get("grid"),
            entry["experiment"],
            entry.get("race"),
        )
