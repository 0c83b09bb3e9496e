"""Reading the runs: every result.json under a root, by the runner that wrote it, into a Collection.

Training runs (runner "train") also become a table with one row per run, keyed by problem and
method (the words are defined in suite/leaderboard/__init__.py), with short labels for both;
other runners' results are kept as they are, for the sections that read them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from suite.errors import SuiteError
from suite.leaderboard.tables import fmt_value
from suite.results.result import TRAIN, damage_of, has_full_spec, is_int, runner_of
from suite.results.rundir import UnreadableFile, read_json, read_text, result_files
from suite.specs.config import TrainConfig
from suite.specs.spec import spec_id, with_later_defaults

COMPONENTS = ("opt", "filter", "sampler")
# part of the problem: steps to different targets, or held for different windows, do not compare
PROBLEM_TRAIN = ("memorization", "target", "hold")
CONDITION_TRAIN = ("steps", "eval_every", "patience", "eval_batch", "checkpoint_every", "hessian_every", "keep_weights")


def hold_of(train: dict) -> int:
    """How long a run's target must hold for it to count as grokked. Runs from before train.hold
    stopped once the target had held `patience` steps, so that is what they can show; one that
    never stopped early ran its whole budget and can show any hold: the current default."""
    if "hold" in train:
        return int(train["hold"])
    if train.get("patience") is not None:
        return int(train["patience"])
    return TrainConfig.hold


SHORT = {"batch_size": "bs", "weight_decay": "wd"}
ABSENT = ("<absent>",)  # a setting a run does not have: differs from every value it could have


def frozen(value):
    """A JSON value as something hashable, so settings can key groups."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    return value


def settings_key(settings: dict) -> tuple:
    return tuple(sorted(settings.items()))


def _read_metrics(path: Path) -> pd.DataFrame | None:
    """A run's evaluations. A torn last line (a run killed mid-write) is left out; a file damaged
    anywhere else is left out whole, with a warning (the run is then judged by its result.json)."""
    if not path.exists():
        return None
    try:
        text = read_text(path, errors="replace")
    except UnreadableFile as err:
        print(f"warning: {err}; its curves are left out", file=sys.stderr)
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if not _evaluation(record):
            if i == len(lines) - 1:
                break
            print(f"warning: {path}: line {i + 1} is not an evaluation; its curves are left out", file=sys.stderr)
            return None
        records.append(record)
    return pd.DataFrame(records) if records else None


def _evaluation(record) -> bool:
    numbers = ("train_acc", "val_acc")
    return (
        isinstance(record, dict)
        and is_int(record.get("step"))
        and all(isinstance(record.get(k), int | float) and not isinstance(record.get(k), bool) for k in numbers)
    )


@dataclass
class Collection:
    root: Path
    results: dict  # runner -> [{"dir", "spec", "result"}], in path order
    runs: pd.DataFrame  # one row per training run
    problems: dict  # problem id -> settings ("task.p": 97, ...)
    methods: dict  # method id -> settings ("opt.name": "adam", ...)
    metrics: dict = field(default_factory=dict)  # run folder -> DataFrame of metrics.jsonl
    result_of: dict = field(default_factory=dict)  # run folder -> its result.json

    @cached_property
    def method_label(self) -> MethodLabels:
        return MethodLabels(self.methods)

    @cached_property
    def problem_label(self) -> ProblemLabels:
        return ProblemLabels(self.problems)


RUN_COLUMNS = [
    "dir",
    "run_id",
    "seed",
    "task",
    "model",
    "problem_id",
    "method_id",
    "wall_s",
    "budget",
    "eval_every",
    "git_commit",
]


def collect(root: str | Path) -> Collection:
    """Every result.json under root (recursively), in path order; the same spec found twice counts
    once. One that cannot be read (a run killed while writing it, a stray file) is skipped with a
    warning: one bad file should not hide every other run."""
    root = Path(root)
    if not root.is_dir():
        raise SuiteError(f"{root}: no such directory of runs")
    col = Collection(root, {}, pd.DataFrame(columns=RUN_COLUMNS), {}, {})
    ids: dict = {"problem": {}, "method": {}}
    rows = []
    for rel, runner, result in _results(root):
        col.results.setdefault(runner, []).append({"dir": rel, "spec": result["spec"], "result": result})
        if runner == TRAIN:
            rows.append(_training_run(col, ids, rel, result))
    if not col.results:
        raise SuiteError(f"{root}: no readable result.json under it")
    col.runs = one_run_per_seed(pd.DataFrame(rows, columns=RUN_COLUMNS))
    return col


def _results(root: Path):
    """(run folder relative to root, runner, result) of every readable result.json, each spec once."""
    seen = set()
    for path in result_files(root):
        try:
            result = read_json(path)
        except (OSError, ValueError) as err:  # ValueError: UnreadableFile (damaged, nested too deep, a FIFO)
            print(f"warning: {path}: unreadable result file ({err}); skipped", file=sys.stderr)
            continue
        if not has_full_spec(result):
            print(f"warning: {path}: not a result file of this suite (no full spec); skipped", file=sys.stderr)
            continue
        spec, runner = result["spec"], runner_of(result)
        if runner == TRAIN and (damage := damage_of(result)):
            print(f"warning: {path}: {damage}; skipped", file=sys.stderr)
            continue
        run_id = result.get("run_id") or spec_id(spec)
        if run_id not in seen:
            seen.add(run_id)
            read = result | {"run_id": run_id, "spec": with_later_defaults(spec)}  # an older spec reads as today's
            yield path.parent.relative_to(root).as_posix(), runner, read


def problem_and_method(spec: dict) -> tuple[dict, dict]:
    """A trained run's settings split as a board splits them: the problem (task, model and what
    counts as success: a table of the board; W&B's group) and the method (optimizer, filter, sampler
    and the rest of the train settings: a row of that table)."""
    train = spec["train"]
    problem = {f"{kind}.{k}": frozen(v) for kind in ("task", "model") for k, v in spec[kind].items()}
    problem |= {f"train.{k}": frozen(train[k]) for k in PROBLEM_TRAIN if k in train} | {"train.hold": hold_of(train)}
    method = {f"{kind}.{k}": frozen(v) for kind in COMPONENTS for k, v in spec[kind].items()}
    method |= {f"train.{k}": frozen(v) for k, v in train.items() if k not in PROBLEM_TRAIN + CONDITION_TRAIN}
    return problem, method


def _training_run(col: Collection, ids: dict, rel: str, result: dict) -> dict:
    """A training run's row: its problem and method (registered in col on first sight), its metrics read."""
    spec = result["spec"]
    train = spec["train"]
    problem, method = problem_and_method(spec)
    problem_id = ids["problem"].setdefault(settings_key(problem), len(ids["problem"]))
    method_id = ids["method"].setdefault(settings_key(method), len(ids["method"]))
    col.problems.setdefault(problem_id, problem)  # in the spec's order, for the headers
    col.methods.setdefault(method_id, method)
    col.metrics[rel] = _read_metrics(col.root / rel / "metrics.jsonl")
    col.result_of[rel] = result
    return {
        "dir": rel,
        "run_id": result["run_id"],
        "seed": spec["seed"],
        "task": spec["task"]["name"],
        "model": spec["model"]["name"],
        "problem_id": problem_id,
        "method_id": method_id,
        "wall_s": result.get("wall_s"),
        "budget": train.get("steps"),
        "eval_every": train.get("eval_every"),
        "git_commit": result.get("git_commit"),
    }


def one_run_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """A seed of a method in a problem counts once: where it ran with several budgets (a 5,000- and a
    20,000-step run of one spec otherwise), the longest run stands for it."""
    order = runs.sort_values(["budget", "dir"], ascending=[False, True], kind="stable")
    kept = order.drop_duplicates(["problem_id", "method_id", "seed"])
    if len(kept) < len(runs):
        print(
            f"note: {len(runs) - len(kept)} runs of a seed that also ran with a longer budget were left out",
            file=sys.stderr,
        )
    return runs.loc[sorted(kept.index)].reset_index(drop=True)


def _varying(dicts: list[dict]) -> list[str]:
    """Keys whose value differs among dicts (absent counts as a value), in first-seen order."""
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    return [k for k in keys if len({d.get(k, ABSENT) for d in dicts}) > 1]


def _bare(key: str) -> str:
    name = key.split(".", 1)[1]
    return SHORT.get(name, name)


class MethodLabels:
    """Short unique method names: the optimizer, filter and sampler, each with the settings that
    vary among the collected runs using that same component, then the train settings that vary."""

    def __init__(self, methods: dict):
        settings = list(methods.values())
        self.varying = {}
        for kind in COMPONENTS:
            for name in {m[f"{kind}.name"] for m in settings}:
                same = [
                    {k: v for k, v in m.items() if k.startswith(kind + ".")}
                    for m in settings
                    if m[f"{kind}.name"] == name
                ]
                self.varying[kind, name] = set(_varying(same))
        self.train_varying = [k for k in _varying(settings) if k.startswith("train.")]
        self.sampler_names_vary = len({m["sampler.name"] for m in settings}) > 1

    def __call__(self, m: dict, drop: tuple[str, ...] = ()) -> str:
        """drop: setting keys (opt.c) or whole components (sampler) to leave out."""

        def part(kind):
            shown = " ".join(
                f"{_bare(k)}={fmt_value(v)}"
                for k, v in m.items()
                if k in self.varying[kind, m[f"{kind}.name"]] and k not in drop
            )
            return f"{m[f'{kind}.name']} {shown}".strip()

        label = part("opt")
        if m["filter.name"] != "none":
            label += " + " + part("filter")
        if "sampler" not in drop and (self.sampler_names_vary or self.varying["sampler", m["sampler.name"]]):
            label += " / " + part("sampler")
        shown = " ".join(f"{_bare(k)}={fmt_value(m[k])}" for k in self.train_varying if k in m and k not in drop)
        return label + (" / " + shown if shown else "")


class ProblemLabels:
    """Per (task, model): the task / model / target settings that vary among its problems."""

    def __init__(self, problems: dict):
        by_pair = {}
        for c in problems.values():
            by_pair.setdefault((c["task.name"], c["model.name"]), []).append(c)
        self.varying = {pair: _varying(members) for pair, members in by_pair.items()}

    def __call__(self, c: dict, drop: tuple[str, ...] = ()) -> str:
        keys = [k for k in self.varying[c["task.name"], c["model.name"]] if k not in drop]
        bare = [k.split(".", 1)[1] for k in keys]
        names = [b if bare.count(b) == 1 else k for b, k in zip(bare, keys)]
        return " ".join(f"{n}={fmt_value(c.get(k, ABSENT))}" for n, k in zip(names, keys))
