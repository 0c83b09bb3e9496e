"""`python -m suite export ROOT [--out DIR]`: every finished run under ROOT as tables pandas reads.

- runs.csv, runs.parquet: one row per result.json under ROOT (recursively): `run` (its run folder,
  relative to ROOT), `runner` (train or probe, suite.results.result.runner_of), `cell_id` (the spec
  without its seed), `grid` and `experiment` (what asked for the run; empty for `suite run`,
  probes and results older than these fields), the spec flattened into
  columns (`task.name`, `task.p`, `opt.lr`, `train.steps`, `seed`, ...; a list such as
  `opt.betas` as JSON text) and the result's scalar fields beside them (`grok_step`,
  `final_val_acc`, `wall_s`, `stack_size`, ...; nested ones, such as a probe's per-layer table, stay
  in result.json; a field renamed since an older run was written, such as its `ensemble_size`, under
  its name now). The same spec found twice is two rows with one `run_id`.
- curves.csv, curves.parquet: those runs' metrics.jsonl in long format, one row per
  (run, step, metric, value).
- probes.csv, probes.parquet (when some run is a number probe): every probe run's probe.csv, one
  row per (run, data, layer) with its scores (rho, PLS R^2, ...), `run` joining it to runs.

exported.txt lists the tables written: the next export into the folder may overwrite those (and
drops one it no longer writes), while a table there that no export wrote (a runs.csv of the user's)
stops it before anything is read or written.

A result.json that cannot be read, or holds no full spec, is skipped with one warning line naming
it (so is a metrics.jsonl that cannot be read or has a record without an integer step: the run's
row stays, without curves).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pandas as pd

from suite.errors import SuiteError
from suite.results.result import current_fields, has_full_spec, runner_of
from suite.results.rundir import RunDir, check_writable, read_json, read_text, result_files, write_atomic
from suite.specs.spec import cell_id

SCALARS = (str, int, float, bool)
IDS = ("runner", "grid", "experiment")  # result fields that go with the run's id columns, first


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0][:200] or type(err).__name__


def _read_result(path: Path) -> dict:
    result = read_json(path)
    if not has_full_spec(result):
        raise ValueError("not a result of this suite (no full spec)")
    return current_fields(result)  # an older result's renamed fields in the same columns as a newer one's


def _evaluations(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl records (none for a probe); none, with a warning naming the file, when
    it is damaged or a record has no step (the curves' key)."""
    path = run_dir / "metrics.jsonl"
    try:
        records = RunDir(run_dir).read_metrics()
        for i, record in enumerate(records):
            step = record.get("step") if isinstance(record, dict) else None
            if not isinstance(step, int) or isinstance(step, bool):
                raise ValueError(f"evaluation {i + 1} has no integer step (got {step!r})")
    except (OSError, ValueError) as err:
        print(f"warning: no curves from {path}: {_first_line(err)}", file=sys.stderr)
        return []
    return records


def flatten(spec: dict) -> dict:
    """{"opt": {"name": "adam", "lr": 0.01}, "seed": 0} -> {"opt.name": "adam", "opt.lr": 0.01, "seed": 0}."""
    flat = {}
    for kind, block in spec.items():
        for key, value in block.items() if isinstance(block, dict) else [(None, block)]:
            scalar = value is None or isinstance(value, SCALARS)
            flat[kind if key is None else f"{kind}.{key}"] = value if scalar else json.dumps(value)
    return flat


TEXT = {  # result fields that are text whatever the runs hold (all null is still text, not a number)
    "run_id", "git_commit", "device", "device_name", "hostname", "created_utc", "stop_reason",
    "suite_version", "torch_version", "python", "omp_wait_policy", "grid", "experiment", "cpu_capability",
    "mkl_cbwr",
}  # fmt: skip


def _column(values: list, text: bool = False) -> pd.api.extensions.ExtensionArray:
    """One type per column from its Python values (None = missing): integers stay integers beside
    a missing value, a column with no value at all is numeric (it is nearly always a step that
    was never reached, such as grok_step), and one that mixes types becomes text, which parquet
    can store."""
    kinds = {type(v) for v in values if v is not None}
    if text:
        return pd.array([None if v is None else str(v) for v in values], dtype="string")
    if kinds and kinds <= {bool}:
        return pd.array(values, dtype="boolean")
    if kinds and kinds <= {int}:
        return pd.array(values, dtype="Int64")
    if kinds <= {int, float}:
        return pd.array([None if v is None else float(v) for v in values], dtype="Float64")
    return pd.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values], dtype="string")


def _table(rows: list[dict], order=lambda column: 0) -> pd.DataFrame:
    columns = sorted(dict.fromkeys(key for row in rows for key in row), key=order)  # stable: first seen first
    return pd.DataFrame({c: _column([row.get(c) for row in rows], c in TEXT) for c in columns})


def _spec_order(column: str) -> int:
    """Spec columns grouped as a spec reads: task, model, opt, sampler, filter, train, seed."""
    kinds = ("task", "model", "opt", "sampler", "filter", "train", "seed")
    kind = column.split(".")[0]
    return kinds.index(kind) if kind in kinds else len(kinds)


def collect(root: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """(runs, curves, probes or None) of every readable result.json under root."""
    ids, specs, scalars, curves, probes = [], [], [], [], []
    for path in result_files(root):
        run = path.parent.relative_to(root).as_posix()
        try:
            result = _read_result(path)
        except (OSError, ValueError) as err:
            print(f"warning: skipped {path}: {_first_line(err)}", file=sys.stderr)
            continue
        records = _evaluations(path.parent)
        where = {"grid": result.get("grid"), "experiment": result.get("experiment")}  # older results: none
        ids.append({"run": run, "runner": runner_of(result), "cell_id": cell_id(result["spec"])} | where)
        if (path.parent / "probe.csv").is_file():
            try:
                probes.append(pd.read_csv(path.parent / "probe.csv").assign(run=run))
            except (OSError, ValueError) as err:
                print(f"warning: no probe scores from {path.parent / 'probe.csv'}: {_first_line(err)}", file=sys.stderr)
        specs.append(flatten(result["spec"]))
        scalars.append({k: v for k, v in result.items() if k not in IDS and (v is None or isinstance(v, SCALARS))})
        curves += [
            (run, record["step"], metric, float(value))
            for record in records
            for metric, value in record.items()
            if metric != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
        ]
    if not ids:
        raise SuiteError(f"no readable result.json under {root}")
    runs = pd.concat([_table(ids), _table(specs, _spec_order), _table(scalars)], axis=1)
    frame = pd.DataFrame(curves, columns=["run", "step", "metric", "value"])
    curves = frame.astype({"run": "string", "step": "int64", "metric": "string", "value": "float64"})
    if not probes:
        return runs, curves, None
    scores = pd.concat(probes, ignore_index=True)
    scores = scores[["run", *(c for c in scores.columns if c != "run")]].convert_dtypes()
    return runs, curves, scores


def export(root: str | Path, out: str | Path) -> tuple[list[Path], pd.DataFrame, pd.DataFrame]:
    """Write runs, curves (and probes) as CSV and parquet into out; return the files, runs and curves."""
    root, out = Path(root), Path(out)
    if not root.is_dir():
        raise SuiteError(f"{root}: no such directory of runs")
    check_writable(out)  # before reading every run
    ours = _exported(out)
    if foreign := [n for n in TABLES if (out / n).exists() and n not in ours]:
        raise SuiteError(
            f"{out / foreign[0]} exists and was not written by an export (not in {out / LISTING}); "
            "choose another --out or move it"
        )
    runs, curves, probes = collect(root)
    out.mkdir(parents=True, exist_ok=True)
    tables = {f"{name}{suffix}": (table, suffix) for name, table in (("runs", runs), ("curves", curves),
              ("probes", probes)) if table is not None for suffix in (".csv", ".parquet")}  # fmt: skip
    write_atomic(out / LISTING, "".join(f"{n}\n" for n in sorted(ours | set(tables))))  # before any table
    for name, (table, suffix) in tables.items():
        write_atomic(out / name, table.to_csv(index=False) if suffix == ".csv" else _parquet(table))
    for stale in sorted(ours - set(tables)):  # an earlier export's probes, say: they would not match these runs
        (out / stale).unlink(missing_ok=True)
    write_atomic(out / LISTING, "".join(f"{n}\n" for n in sorted(tables)))
    return [out / name for name in tables], runs, curves


TABLES = tuple(f"{name}{suffix}" for name in ("runs", "curves", "probes") for suffix in (".csv", ".parquet"))
LISTING = "exported.txt"  # the tables the last export into a folder wrote: only those it overwrites


def _exported(out: Path) -> set[str]:
    """The tables an earlier export wrote into out (its listing's names that are tables)."""
    listing = out / LISTING
    return set(read_text(listing).split()) & set(TABLES) if listing.exists() else set()


def _parquet(table: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    table.to_parquet(buf, index=False, engine="pyarrow")
    return buf.getvalue()
