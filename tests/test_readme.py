"""README's example commands work as shown (issue 47): each parses, and each that trains or reads a
grid starts, run from an empty folder for a few steps (its other settings as the README gives them).
The commands that read runs a user made (leaderboard, compare, export) and the bench are parsed here
and run on real runs by their own tests (test_leaderboard, test_compare_command, test_export, test_bench)."""

import json
import shlex

import pytest
from conftest import REPO

from suite.cli import main, make_parser
from suite.commands.run import dotted_settings

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
    assert {"list", "run", "grid", "status", "leaderboard", "compare", "tune", "export", "bench"} <= kinds
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


@pytest.mark.parametrize("command", STARTED)
def test_each_readme_command_that_trains_or_reads_a_grid_starts(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # its runs/ and every relative --out or --root land here
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    args = argv(command)
    if args[0] in ("grid", "tune"):
        assert main([*args, "--dry-run"]) == 0  # the grid loads, its cells build, nothing trains
        return
    if args[0] != "run":
        assert main(args) == 0
        return
    probe = "--task number_probe" in command  # trains nothing: no steps to cut
    extra = [flag for key, flags in SMALLER.items() if key in command for flag in flags]
    assert main([*args, *extra, *([] if probe else FEW_STEPS)]) == 0, capsys.readouterr().err
    results = [json.loads(p.read_text()) for p in tmp_path.rglob("result.json")]
    assert results and all(probe or r["steps"] == 2 for r in results)
    assert len(results) == (32 if "--seeds 0-31" in command else 1)
