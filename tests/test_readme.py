"""README's example commands work as shown (issues 47, 63): each parses, each that trains or reads a
grid starts from an empty folder for a few steps (its other settings as the README gives them), each
that reads a user's runs starts over the fixture's runs, and each ends as the README says it ends.
The bench and the commands over committed boards run in their own tests (test_bench, test_leaderboard)."""

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import REPO

from suite.cli import main, make_parser
from suite.commands.run import dotted_settings
from suite.launch.grid import check_builds, load

README = (REPO / "README.md").read_text()
# every line of an indented command block that calls the suite, without its comment
COMMANDS = [line.split(" #")[0].strip() for line in README.splitlines() if line.startswith("    python -m suite ")]
FEW_STEPS = ["--steps", "2", "--set", "train.eval_every=2"]
# Less data where one evaluation alone would take minutes on a CPU; the code path is the same.
SMALLER = {
    "--task polygons": ["--set", "train_frac=0.01", "--set", "n_val=32", "--set", "batch_size=16"],  # ResNet-18
    "--task number_probe": ["--set", "runs=1", "--set", "per_group=4"],  # SmolLM2's forward passes
}
USERS_OWN = "path=/models/"  # a model on the user's disk: parsed, not started
# a user's method file added to the headline board: parsed here, run end to end on a board of its own by test_add_method
ADDS = "tune --add"


def argv(command: str) -> list[str]:
    return shlex.split(command)[3:]  # after `python -m suite`


def test_the_readme_shows_commands_of_every_kind():
    kinds = {argv(command)[0] for command in COMMANDS}
    assert {"list", "run", "grid", "status", "leaderboard", "compare", "replay", "tune", "export", "bench"} <= kinds
    assert "python -m suite run --model transformer --opt adamlr" in COMMANDS  # the card's command


@pytest.mark.parametrize("command", COMMANDS)
def test_each_readme_command_parses(command):
    args, extra = make_parser().parse_known_args(argv(command))  # exits on a flag it does not know
    assert not extra or (args.command == "run" and dotted_settings(extra) is not None)


STARTED = [
    c
    for c in COMMANDS
    if argv(c)[0] in ("list", "run", "grid", "tune", "status") and USERS_OWN not in c and ADDS not in c
]
# A real pretrained or image model started, minutes of CPU even made smaller: the slow tier (pytest -m "not slow"
# leaves them out while working; CI runs them). They stay: the only start of these models from their README command.
SLOW = ("--task number_probe", "--task polygons")


@pytest.mark.parametrize(
    "command", [pytest.param(c, marks=pytest.mark.slow) if any(s in c for s in SLOW) else c for c in STARTED]
)
def test_each_readme_command_that_trains_or_reads_a_grid_starts_and_ends_as_it_says(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # its runs/ and every relative --out or --root land here
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    args = argv(command)
    if args[0] in ("grid", "tune"):
        assert main([*args, "--dry-run"]) == 0  # the grid loads and its cells are counted; nothing trains
        assert re.search(r"^[\w.-]+: \d+ cells, 0 done, 0 running, \d+ to run", capsys.readouterr().err, re.M)
        return
    if args[0] != "run":
        assert main(args) == 0
        out = capsys.readouterr().out
        assert re.search(r"^\d+ cells: 0 done, \d+ missing$", out, re.M) if args[0] == "status" else out.strip()
        return
    probe = "--task number_probe" in command  # trains nothing: no steps to cut
    extra = [flag for key, flags in SMALLER.items() if key in command for flag in flags]
    assert main([*args, *extra, *([] if probe else FEW_STEPS)]) == 0, capsys.readouterr().err
    results = [json.loads(p.read_text()) for p in tmp_path.rglob("result.json")]
    assert results and all(probe or r["steps"] == 2 for r in results)
    assert len(results) == (32 if "--seeds 0-31" in command else 1)
    last = capsys.readouterr().out.strip().splitlines()[-1]  # README: the last line on stdout is result.json's path
    assert last.endswith("result.json") and Path(last).is_file()


GRID_FILES = sorted({arg for c in COMMANDS for arg in argv(c) if arg.endswith(".toml") and argv(c)[0] == "grid"})


@pytest.mark.parametrize("grid_file", GRID_FILES)
def test_the_cells_of_each_readme_grid_build(grid_file):
    # a dry run counts the cells and builds none: that they build is checked here, once a file
    grid = load(REPO / grid_file)
    check_builds(grid.cells)


# The commands that read runs a user made, started over the fixture's runs in every root they name;
# those of committed boards (leaderboards/...) are test_leaderboard's, and an across-cells comparison
# needs runs that differ in that setting (test_compare_command)
READS = [
    c
    for c in COMMANDS
    if argv(c)[0] in ("leaderboard", "compare", "export") and "leaderboards/" not in c and "embed_init" not in c
]


@pytest.mark.parametrize("command", READS)
def test_each_readme_command_that_reads_runs_starts_and_ends_as_it_says(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = argv(command)
    roots = [a for a in args[1:3] if a.startswith("runs")] or ["runs"]  # a bare leaderboard reads runs/
    for root in roots:  # runs/, runs/old, runs/paper, ...: each the fixture's runs
        shutil.copytree(REPO / "tests/fixtures/leaderboard/runs", tmp_path / root / "fixture")
    assert main(args) == 0
    out = capsys.readouterr().out
    if args[0] == "leaderboard":  # the verdicts in one sentence, then the index's path
        *_, sentence, index = out.splitlines()
        assert sentence.startswith("Verdicts: ") and Path(index).name == "index.md" and Path(index).is_file()
    elif args[0] == "compare":
        assert out.startswith("# B against A") and "| not resolved (n = " in out
    else:
        assert (tmp_path / "runs" / "export" / "runs.csv").is_file()
