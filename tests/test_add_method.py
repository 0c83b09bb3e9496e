"""`suite tune --add FILE --against BOARD --root ROOT`: a new method on a committed tuned board, under its
protocol (cells, N, seeds, common points), its row beside the board's with a verdict, and the board's
files never written."""

import hashlib
import json
import math
import shutil
import textwrap

import pytest
from conftest import PARITY_FIXED, chunks_here

from suite.cli import main
from suite.errors import SuiteError

# the workers of a grid or tune run in this process: what they compute is the point, not their processes
pytestmark = pytest.mark.usefixtures("chunks_in_process")

BOARD = (
    'name = "board"\n'
    + PARITY_FIXED
    + "patience = 40\n"
    + textwrap.dedent("""
    [tuning]
    trials = 3
    tuning_seeds = [100]
    final_seeds = [0, 1, 2, 3, 4]
    race = true
    [tuning.shared]
    lr = { log = [0.003, 0.3] }
    weight_decay = { log = [0.0001, 0.1] }
    [tuning.methods.adamw]
    opt = "adamw"
""")
)

MINE = textwrap.dedent("""
    [tuning.methods.mine]
    opt = "adamwlr"
    baseline = "adamw"
    space = { c = { log = [1, 30] } }
""")


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """A tuned board in the committed layout (BOARD/runs with tuning.json), as leaderboards/ keeps one."""
    where = tmp_path_factory.mktemp("made")
    (where / "board.toml").write_text(BOARD)
    with chunks_here():
        assert main(["tune", str(where / "board.toml"), "--root", str(where / "root"), "--workers", "2"]) == 0
    board = where / "committed"
    shutil.copytree(where / "root" / "final", board / "runs")
    return board


def _hashes(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def test_a_method_added_to_a_board_gets_its_row_and_verdict_and_the_board_is_left_byte_for_byte(
    committed, tmp_path, capsys
):
    before = _hashes(committed)
    (tmp_path / "mine.toml").write_text(MINE)
    args = ["tune", "--add", str(tmp_path / "mine.toml"), "--against", str(committed), "--root", str(tmp_path / "r")]
    assert main(args + ["--workers", "2"]) == 0
    assert _hashes(committed) == before
    board_record = json.loads((committed / "runs" / "tuning.json").read_text())
    record = json.loads((tmp_path / "r" / "final" / "tuning.json").read_text())
    assert set(record["methods"]) == {"adamw", "mine"} and record["protocol"] == board_record["protocol"]
    ours = next(c for c in record["chosen"] if c["method"] == "mine")
    theirs = next(c for c in record["chosen"] if c["method"] == "adamw")
    assert theirs == board_record["chosen"][0]  # the board's choice, as committed
    # the same common points: point k of the new method has the board's lr and weight decay
    for mine, board in zip(ours["tried"], theirs["tried"]):
        assert (mine["settings"]["lr"], mine["settings"]["weight_decay"]) == (
            board["settings"]["lr"],
            board["settings"]["weight_decay"],
        )
    # only the new method ran: 3 tuning runs and 5 final runs of its own, the board's final runs linked
    assert len(list((tmp_path / "r" / "tuning").rglob("result.json"))) == 3
    linked = [p for p in (tmp_path / "r" / "final").rglob("*") if p.is_symlink()]
    assert len(linked) == 5 and all(p.resolve().is_relative_to(committed.resolve()) for p in linked)
    verdicts = (tmp_path / "r" / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    row = next(line for line in verdicts.splitlines() if line.startswith("| board | mine |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[9] == "adamw" and cells[-1] not in ("", "-")  # judged against the board's AdamW
    assert cells[6] not in ("", "-")  # its cost measured here, beside the board's rows
    assert any(line.startswith("| board | adamw |") for line in verdicts.splitlines())
    # run again: everything is done, nothing reruns, and the board is the same
    capsys.readouterr()
    assert main(args) == 0
    assert "0 to run" in capsys.readouterr().err and _hashes(committed) == before
    # a second method added into the same root: the first one's choice and row stay beside it
    (tmp_path / "other.toml").write_text(MINE.replace("methods.mine", "methods.other").replace("30]", "3]"))
    assert main(args[:2] + [str(tmp_path / "other.toml")] + args[3:] + ["--workers", "2"]) == 0
    both = json.loads((tmp_path / "r" / "final" / "tuning.json").read_text())
    assert set(both["methods"]) == {"adamw", "mine", "other"}
    assert next(c for c in both["chosen"] if c["method"] == "mine") == ours
    assert len(list((tmp_path / "r" / "tuning").rglob("result.json"))) == 6
    rows = (tmp_path / "r" / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    assert all(any(line.startswith(f"| board | {m} |") for line in rows.splitlines()) for m in ("mine", "other"))
    assert _hashes(committed) == before


def test_a_board_made_at_another_protocol_or_a_taken_name_is_refused_in_one_line(committed, tmp_path, capsys):
    (tmp_path / "mine.toml").write_text(MINE)
    old = tmp_path / "old"
    shutil.copytree(committed, old)
    record = json.loads((old / "runs" / "tuning.json").read_text())
    (old / "runs" / "tuning.json").write_text(json.dumps(record | {"protocol": 1}))
    args = ["tune", "--add", str(tmp_path / "mine.toml"), "--root", str(tmp_path / "r")]
    assert main(args + ["--against", str(old)]) == 2
    err = capsys.readouterr().err
    assert "run by computation 1" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "mine.toml").write_text(MINE.replace("methods.mine", "methods.adamw"))
    assert main(args + ["--against", str(committed)]) == 2
    assert "'adamw' is already a method of the board" in capsys.readouterr().err
    assert main(args + ["--against", str(committed), "--root", str(committed / "mine")]) == 2
    assert "overlaps the board" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def _edited(record: dict, edit: str) -> dict:
    """The board's record with one edit a hostile or careless hand makes."""
    record = json.loads(json.dumps(record))
    if edit == "trials":
        record["trials"], record["rounds"][0]["trials"] = 2, 2
    elif edit == "final seeds":
        record["final_seeds"] = [0, 1, 2, 3, 5]
    elif edit == "a cell's budget":
        next(iter(record["cells"].values()))["train"]["steps"] = 50
    elif edit == "a shared range":
        record["shared"]["lr"] = {"log": [0.001, 0.3]}
    elif edit in ("a grid name that climbs out", "a grid name that is a path"):
        record["grid"] = "../../x" if "climbs" in edit else "/tmp/x"
    return record


@pytest.mark.parametrize(
    "edit, says",
    [
        ("trials", "holds 3 trials where the protocol runs 2"),
        ("final seeds", "its final runs are not the chosen point's on the final seeds"),
        ("a cell's budget", "its final runs are not the chosen point's"),
        ("a shared range", "trial 0 is not the point its round draws"),
        ("a grid name that climbs out", "is not a tuning record of this suite"),
        ("a grid name that is a path", "is not a tuning record of this suite"),
    ],
)
def test_a_board_whose_record_was_edited_is_refused_in_one_line_and_nothing_is_written(
    committed, tmp_path, capsys, edit, says
):
    board = tmp_path / "board"
    shutil.copytree(committed, board)
    record = json.loads((board / "runs" / "tuning.json").read_text())
    (board / "runs" / "tuning.json").write_text(json.dumps(_edited(record, edit)))
    (tmp_path / "mine.toml").write_text(MINE)
    root = tmp_path / "deep" / "er" / "r"
    args = ["tune", "--add", str(tmp_path / "mine.toml"), "--against", str(board), "--root", str(root)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "deep").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("damage", ["every final run deleted", "one final run deleted", "made by other code"])
def test_a_board_whose_runs_do_not_match_its_record_is_refused_in_one_line(committed, tmp_path, capsys, damage):
    board = tmp_path / "board"
    shutil.copytree(committed, board)
    results = sorted((board / "runs").rglob("result.json"))
    if damage == "made by other code":
        for result in results:  # as another version of the task's module would have recorded it
            code = json.loads((result.parent / "code.json").read_text())
            code["task"]["code_sha256"] = "0" * 64
            (result.parent / "code.json").write_text(json.dumps(code))
    for result in results if damage == "every final run deleted" else results[:1] if "one" in damage else []:
        shutil.rmtree(result.parent)
    (tmp_path / "mine.toml").write_text(MINE)
    args = ["tune", "--add", str(tmp_path / "mine.toml"), "--against", str(board), "--root", str(tmp_path / "r")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    says = "was made by other code of task" if damage == "made by other code" else "is missing or unfinished"
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "r").exists()


def test_two_adds_into_one_root_at_once_both_stay_in_its_record(committed, tmp_path, monkeypatch):
    """The second add read the root's record before the first wrote its choice (they ran at once):
    the record it writes keeps the first one's method and choice beside its own."""
    from suite.launch import adding

    (tmp_path / "mine.toml").write_text(MINE)
    (tmp_path / "other.toml").write_text(MINE.replace("methods.mine", "methods.other").replace("30]", "3]"))
    args = ["--against", str(committed), "--root", str(tmp_path / "r"), "--workers", "2"]
    assert main(["tune", "--add", str(tmp_path / "mine.toml"), *args]) == 0
    monkeypatch.setattr(adding, "earlier_methods", lambda record, final: {})  # as if it started first
    assert main(["tune", "--add", str(tmp_path / "other.toml"), *args]) == 0
    record = json.loads((tmp_path / "r" / "final" / "tuning.json").read_text())
    assert set(record["methods"]) == {"adamw", "mine", "other"}
    assert {c["method"] for c in record["chosen"]} == {"adamw", "mine", "other"}


def test_a_board_whose_search_failed_in_a_cell_is_accepted_without_final_runs_there(committed):
    """A failed search (no trial reached the target on a tuning seed) ran no final seeds: its record
    says final_runs = [], and that agrees with the protocol."""
    from suite.launch.adding import check_board
    from suite.launch.tuning import best_of
    from suite.results.tuning_record import record_of

    record = record_of(committed / "runs")
    choice = record["chosen"][0]
    for trial in choice["tried"]:
        trial["times"], trial["median_time"] = [math.inf] * len(trial["times"]), math.inf
    winner = best_of(choice["tried"])
    choice |= {"chosen": winner["point"], "settings": winner["settings"], "final_runs": []}
    check_board(record, committed / "runs")  # no line: the record and the runs agree
    choice["final_runs"] = ["0" * 12]
    with pytest.raises(SuiteError, match="its final runs are not the chosen point's"):
        check_board(record, committed / "runs")


def test_a_board_that_ran_a_failed_search_s_final_seeds_is_accepted(committed):
    """Earlier versions of `suite tune` (the v3 headline board's) ran a failed search's final seeds: a
    record that lists the chosen point's final runs agrees with the protocol too."""
    from suite.launch.adding import check_board
    from suite.results.tuning_record import record_of

    record = record_of(committed / "runs")
    choice = record["chosen"][0]
    for trial in choice["tried"]:  # no trial reached the target; the tie-break still picks the point that ran
        trial["times"], trial["median_time"] = [math.inf] * len(trial["times"]), math.inf
        trial["median_best_val"] = 0.9 if trial["point"] == choice["chosen"] else 0.5
    assert choice["final_runs"]
    check_board(record, committed / "runs")  # no line: the record and the runs agree


def test_a_record_written_under_another_protocol_says_which_cells_it_drops(committed, tmp_path, capsys):
    from suite.results.tuning_record import record_of, write_record

    path = tmp_path / "tuning.json"
    shutil.copy(committed / "runs" / "tuning.json", path)
    old = json.loads(path.read_text())
    protocol = {k: v for k, v in old.items() if k not in ("chosen", "cells", "protocol")}
    first = old["chosen"][0]
    elsewhere = [first | {"cell": "elsewhere"}], {"elsewhere": old["cells"][first["cell"]]}
    write_record(path, protocol, *elsewhere)  # the same protocol: another experiment's choices are kept
    assert "note" not in capsys.readouterr().err
    assert {c["cell"] for c in record_of(tmp_path)["chosen"]} == {first["cell"], "elsewhere"}
    write_record(path, protocol | {"trials": protocol["trials"] + 1}, *elsewhere)  # the [tuning] table changed
    err = capsys.readouterr().err
    assert f"{first['method']} in {first['cell']} dropped" in err and "tune them again" in err
    assert {c["cell"] for c in record_of(tmp_path)["chosen"]} == {"elsewhere"}
    # a choice dropped from a cell that keeps others is named too
    two = protocol | {"methods": protocol["methods"] | {"other": protocol["methods"][first["method"]]}}
    write_record(path, two, [first | {"method": "other"}], old["cells"])
    capsys.readouterr()
    write_record(path, two | {"trials": protocol["trials"] + 2}, [first], old["cells"])
    assert f"note: {path}" in (err := capsys.readouterr().err) and f"other in {first['cell']} dropped" in err, err


def test_a_method_with_no_baseline_or_more_recipes_than_the_board_s_methods_is_refused(committed, tmp_path, capsys):
    # no baseline: hours of runs for no verdict; more recipes: points picked without the search, after
    # the board's results are public (the board's methods declared theirs, here none, before their runs)
    args = ["tune", "--add", str(tmp_path / "mine.toml"), "--against", str(committed), "--root", str(tmp_path / "r")]
    for text, says in [
        (MINE.replace('baseline = "adamw"\n', ""), "method 'mine' names no baseline"),
        (MINE + "recipes = [{ lr = 0.01, weight_decay = 0.001, c = 10 }]\n", "1 recipes, more than any method"),
    ]:
        (tmp_path / "mine.toml").write_text(text)
        assert main(args + ["--dry-run"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "r").exists()


def test_a_run_of_another_s_in_the_place_of_a_board_run_is_refused_before_any_run(committed, tmp_path, capsys):
    # a root holding the board's runs as copies (edited or not) would have the board judged from them
    (tmp_path / "mine.toml").write_text(MINE)
    root = tmp_path / "r"
    shutil.copytree(committed / "runs", root / "final")
    args = ["tune", "--add", str(tmp_path / "mine.toml"), "--against", str(committed), "--root", str(root)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a link to the board's run" in err[0], err
    assert not (root / "tuning").exists()


def test_a_board_still_running_is_checked_only_in_the_cells_a_method_is_added_to(committed):
    # the headline board commits its cells as they finish: a method can join the finished ones
    import copy

    from suite.launch.adding import check_board
    from suite.results.tuning_record import record_of

    record = record_of(committed / "runs")
    unfinished = copy.deepcopy(record["chosen"][0]) | {"cell": "later"}
    unfinished["final_runs"] = unfinished["final_runs"][:2]  # its search still drawing its final runs
    record["cells"]["later"], record["chosen"] = record["cells"]["board"], [*record["chosen"], unfinished]
    check_board(record, committed / "runs", ["board"])  # no line: the cell named agrees with its runs
    with pytest.raises(SuiteError, match=r"cell \[later\].*its final runs are not the chosen point's"):
        check_board(record, committed / "runs")
