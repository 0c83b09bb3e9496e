"""`suite export`: every run under a root as one table (CSV, parquet) and its curves in long format."""

import json
import shutil

import pandas as pd
import pytest
from conftest import REPO, TINY, as_args, as_fixed, chunks_here

from suite.cli import main
from suite.specs.spec import cell_id

ARGS = [*as_args({**TINY, "train.steps": 20}), "--wandb", "off"]
PROBE = next(REPO.glob("leaderboards/probes/runs/*/*/result.json"))  # a committed number-probe result


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Two trained runs (one a level deeper), one cell of a grid's experiment, a probe's result with
    its scores, and a result.json that is not one."""
    root = tmp_path_factory.mktemp("export") / "runs"
    assert main(["run", *ARGS, "--out", str(root / "a")]) == 0
    assert (
        main(
            [
                "run",
                *ARGS,
                "--opt",
                "adamlr",
                "--set",
                "opt.lr=3e-3",
                "--seed",
                "1",
                "--out",
                str(root / "deeper" / "b"),
            ]
        )
        == 0
    )
    grid = root.parent / "tiny.toml"
    grid.write_text(
        'name = "tiny"\n'
        + as_fixed({**TINY, "train.steps": 20})
        + '[[experiment]]\nname = "small-lr"\n[experiment.fixed]\n"opt.lr" = 1e-3\n'
    )
    with chunks_here():
        assert main(["grid", str(grid), "--root", str(root / "grid"), "--workers", "1"]) == 0
    (root / "probe").mkdir()
    shutil.copy(PROBE, root / "probe" / "result.json")
    shutil.copy(PROBE.with_name("probe.csv"), root / "probe" / "probe.csv")
    (root / "torn").mkdir()
    (root / "torn" / "result.json").write_text('{"spec": {"task"')
    return root


def test_one_row_per_run_with_the_spec_flattened_and_the_result_beside_it(root, capsys):
    capsys.readouterr()
    assert main(["export", str(root)]) == 0
    out, err = capsys.readouterr()
    names = ["runs.csv", "runs.parquet", "curves.csv", "curves.parquet", "probes.csv", "probes.parquet"]
    assert out.splitlines() == [str(root / "export" / name) for name in names]
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert (
        len(warnings) == 1
        and warnings[0].startswith(f"warning: skipped {root / 'torn' / 'result.json'}: ")
        and "not valid JSON (Expecting" in warnings[0]
    )

    runs = pd.read_parquet(root / "export" / "runs.parquet")
    assert list(runs["run"])[:2] == ["a", "deeper/b"] and list(runs["run"])[3] == "probe"
    assert list(runs["runner"]) == ["train", "train", "train", "probe"]
    # what asked for each run: the grid and its experiment, nothing for `suite run` and the probe
    assert list(runs["grid"].fillna("-")) == ["-", "-", "tiny", "-"]
    assert list(runs["experiment"].fillna("-")) == ["-", "-", "small-lr", "-"]
    assert list(runs.columns[:5]) == ["run", "runner", "cell_id", "grid", "experiment"]
    for _, row in runs.iterrows():
        result = json.loads((root / row["run"] / "result.json").read_text())
        for kind, block in result["spec"].items():
            for key, value in block.items() if isinstance(block, dict) else [(None, block)]:
                cell = row[kind if key is None else f"{kind}.{key}"]
                assert (json.dumps(value) if isinstance(value, list) else value) == (None if pd.isna(cell) else cell)
        for key in ("run_id", "wall_s", "device", "git_commit") + (
            ("grok_step", "final_val_acc", "steps") if row["runner"] == "train" else ()
        ):
            assert (None if pd.isna(row[key]) else row[key]) == result[key], key
    b = runs.set_index("run").loc["deeper/b"]
    assert (b["opt.name"], b["opt.lr"], b["task.p"], b["train.steps"], b["seed"]) == ("adamlr", 0.003, 11, 20, 1)
    assert str(runs["task.p"].dtype) == str(runs["steps"].dtype) == "Int64"  # integers beside the probe's missing ones
    assert pd.api.types.is_numeric_dtype(runs["grok_step"])  # even where no run grokked
    assert runs.loc[3, "task.p"] is pd.NA and "numbers" not in runs  # a probe has no p; nested fields stay out
    assert runs.loc[0, "opt.betas"] == "[0.9, 0.999]"
    assert str(runs["git_commit"].dtype) == str(runs["hostname"].dtype) == "string"  # text even when all null
    assert runs.loc[0, "cell_id"] == cell_id(json.loads((root / "a" / "result.json").read_text())["spec"])

    csv = pd.read_csv(root / "export" / "runs.csv")
    assert list(csv.columns) == list(runs.columns)
    for column in ("opt.lr", "task.p", "grok_step"):
        pd.testing.assert_series_equal(csv[column], runs[column].astype("float64"))


def test_curves_are_every_metrics_line_in_long_format(root):
    main(["export", str(root), "--out", str(root.parent / "elsewhere")])
    curves = pd.read_parquet(root.parent / "elsewhere" / "curves.parquet")
    assert list(curves.columns) == ["run", "step", "metric", "value"]
    runs = pd.read_parquet(root.parent / "elsewhere" / "runs.parquet")
    assert set(curves["run"]) == set(runs["run"][runs["runner"] == "train"])  # the probe wrote no curves
    for run in ("a", "deeper/b"):
        records = [json.loads(line) for line in (root / run / "metrics.jsonl").read_text().splitlines()]
        mine = curves[curves.run == run]
        assert list(mine["step"].drop_duplicates()) == [r["step"] for r in records] == [0, 10, 20]
        wide = mine.pivot(index="step", columns="metric", values="value")
        assert 0 <= wide["elapsed_s"].iloc[0] < wide["elapsed_s"].iloc[-1]  # the clock is a curve too
        for record in records:
            assert {k: v for k, v in record.items() if k != "step"} == pytest.approx(
                wide.loc[record["step"]].dropna().to_dict()
            )  # step 0 has no train_acc_running
    pd.testing.assert_frame_equal(pd.read_csv(root.parent / "elsewhere" / "curves.csv"), curves, check_dtype=False)


OLD_RUN = REPO / "leaderboards/adamlr/runs/modular-mlp-adam-random/seed0-52d1971e0d85"  # one of a stack of 8


def test_a_result_that_says_ensemble_size_reads_as_stack_size(root, tmp_path):
    # the committed runs were written when result.json said "ensemble_size" for "stack_size": read,
    # exported and summed up, they are what a run written now would be
    from suite.results.result import current_fields, stack_size, summary

    old = json.loads((OLD_RUN / "result.json").read_text())
    assert old["ensemble_size"] == 8 and "stack_size" not in old
    now = current_fields(old)
    assert now["stack_size"] == stack_size(old) == 8 and "ensemble_size" not in now
    assert list(now) == [{"ensemble_size": "stack_size"}.get(k, k) for k in old]  # in its place, the rest as it was
    assert summary(old).endswith("(its share of a stack of 8)")
    mixed = tmp_path / "mixed"
    shutil.copytree(OLD_RUN, mixed / "old")
    shutil.copytree(root / "a", mixed / "new")
    assert main(["export", str(mixed), "--out", str(tmp_path / "out")]) == 0
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("run")
    assert "ensemble_size" not in runs.columns
    assert runs["stack_size"].to_dict() == {"new": 1, "old": 8}


def test_probe_scores_are_rows_joined_to_their_run(root):
    main(["export", str(root), "--out", str(root.parent / "probes")])
    probes = pd.read_parquet(root.parent / "probes" / "probes.parquet")
    committed = pd.read_csv(PROBE.with_name("probe.csv"))
    assert list(probes.columns) == ["run", *committed.columns] and set(probes["run"]) == {"probe"}
    assert len(probes) == len(committed) and probes["layer"].tolist() == committed["layer"].tolist()
    assert probes["rho_mean"].astype(float).tolist() == pytest.approx(committed["rho_mean"].tolist())
    pd.testing.assert_frame_equal(pd.read_csv(root.parent / "probes" / "probes.csv"), probes, check_dtype=False)


def test_the_readme_snippet_reads_an_export_that_holds_a_run_that_grokked_and_one_that_failed(
    root, tmp_path, monkeypatch, capsys
):
    from test_leaderboard_embedding import write_run

    readme = (REPO / "README.md").read_text()
    code = readme.split("<!-- export -->")[1].split("```python")[1].split("```")[0]
    runs = tmp_path / "runs"
    shutil.copytree(root, runs)
    write_run(runs / "more", 0, opt="sgd", grok_step=300)
    write_run(runs / "more", 1, opt="sgd", grok_step=None)  # grok_step is then an integer column with a gap
    main(["export", str(runs)])
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(code, scope)
    assert {"a", "deeper/b"} < set(scope["val_acc"]["run"]) and "seed" in scope["val_acc"]
    out = capsys.readouterr().out
    assert "adamlr" in out and "sgd" in out
    assert scope["runs"]["grok_step"].dtype == "Int64" and {300.0, float("inf")} <= set(scope["t"])


def test_an_export_never_overwrites_a_table_it_did_not_write(root, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "runs.csv").write_text("the user's own table\n")
    assert main(["export", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out / 'runs.csv'} exists and was not written by an export" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["runs.csv"] and (out / "runs.csv").read_text().startswith("the")
    again = tmp_path / "again"  # its own tables an export writes again, and one it no longer writes goes
    assert main(["export", str(root), "--out", str(again)]) == 0
    assert (again / "probes.csv").exists()
    only_trained = tmp_path / "trained"
    shutil.copytree(root, only_trained, ignore=shutil.ignore_patterns("probe"))
    assert main(["export", str(only_trained), "--out", str(again)]) == 0
    assert not (again / "probes.csv").exists() and (again / "runs.csv").exists()


def test_nothing_to_export_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: {tmp_path / 'nowhere'}: no such directory of runs",
        f"error: no readable result.json under {tmp_path / 'empty'}",
    ]
    assert not (tmp_path / "empty" / "export").exists()


HISTORIES = {  # a metrics.jsonl whose records cannot be curves: no step, or a step that is not a number
    "no step": '{"train_loss": 1.0}\n',
    "a step that is text": '{"step": "ten", "train_loss": 1.0}\n',
    "a record that is a number": "3\n",
}


@pytest.mark.parametrize("history", HISTORIES)
def test_a_result_without_a_spec_or_curves_without_a_step_is_a_warning_naming_the_file(root, tmp_path, capsys, history):
    runs = tmp_path / "runs"
    for name in ("kept", "empty_spec", "no_steps"):
        shutil.copytree(root / "a", runs / name)
    result = json.loads((runs / "empty_spec" / "result.json").read_text())
    (runs / "empty_spec" / "result.json").write_text(json.dumps(result | {"spec": {}}))
    (runs / "no_steps" / "metrics.jsonl").write_text(HISTORIES[history])
    capsys.readouterr()
    assert main(["export", str(runs), "--out", str(tmp_path / "out")]) == 0
    warnings = capsys.readouterr().err.strip().splitlines()[:-1]  # the last line says what was written
    assert len(warnings) == 2 and all(line.startswith("warning: ") for line in warnings)
    assert str(runs / "empty_spec" / "result.json") in warnings[0] and "no full spec" in warnings[0]
    assert str(runs / "no_steps" / "metrics.jsonl") in warnings[1]
    exported = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    curves = pd.read_parquet(tmp_path / "out" / "curves.parquet")
    assert list(exported["run"]) == ["kept", "no_steps"] and set(curves["run"]) == {"kept"}


def test_a_root_made_of_links_to_other_roots_runs_is_read_through_them_each_once(tmp_path):
    source = REPO / "leaderboards/hessian/runs"
    root = tmp_path / "root"
    root.mkdir()
    for folder in (d for d in source.iterdir() if d.is_dir()):
        (root / folder.name).symlink_to(folder)
    (root / "again").symlink_to(root)  # a link back up is followed once, not forever
    assert main(["export", str(root), "--out", str(tmp_path / "out")]) == 0
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert len(runs) == len(list(source.rglob("result.json"))) > 0
