"""A method added to a committed tuned board (`suite tune --add FILE --against BOARD --root ROOT`),
under the board's own protocol, without rerunning its baselines or touching its files.

The board's tuning.json holds the protocol: N, the seeds, the shared spaces (so the new method gets
the same common points), the race, the base cells' specs (budgets included) and the methods already
on it. The new method is tuned and rerun on those cells under ROOT/tuning and ROOT/final like any
tuned method; ROOT/final also links the board's final runs (read through the links, never copied)
and holds a tuning.json of the board's choices and the new one, so ROOT/board has the new rows
beside the committed ones, with verdicts against their baselines.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from suite.errors import SuiteError
from suite.launch.grid import Grid
from suite.launch.spaces import Tuning, parse
from suite.launch.tuning import best_of, spec_for
from suite.results.result import has_full_spec
from suite.results.rundir import RunDir, read_json, result_files
from suite.results.tuning_record import reached, record_of
from suite.specs.cell import Cell
from suite.specs.code import COMPUTATION, changed
from suite.specs.spec import canonical, spec_id

RECORD_PLACES = (".", "runs", "final")  # where a board keeps tuning.json: committed boards in runs/


def board_record(board: str | Path) -> tuple[dict, Path]:
    """The board's tuning record and the folder of final runs it sits in; one line if it has none,
    was made at another protocol, or predates recorded base cells."""
    for place in RECORD_PLACES:
        folder = Path(board) / place
        record = record_of(folder)
        if record is not None:
            break
    else:
        raise SuiteError(f"{board} holds no tuning.json (in it, runs/ or final/): --against takes a tuned board")
    made_at = record.get("protocol", 1)
    if made_at != COMPUTATION:
        raise SuiteError(
            f"{board} was run by computation {made_at} and this suite computes runs as computation {COMPUTATION}: its "
            "baselines and your method would not be measured alike; add it at the commit its runs name "
            "(git_commit in their result.json), or rerun the board"
        )
    if not isinstance(record.get("cells"), dict) or not record["cells"]:
        raise SuiteError(
            f"{folder / 'tuning.json'} records no base cells (written before `tune --add`): rerun the board"
        )
    return record, folder


def protocol(record: dict, method_file: str | Path, earlier: dict) -> Tuning:
    """The board's protocol, its methods, those added `earlier` into the same root (as tuning.json
    records them) and those of method_file: a TOML file of [tuning.methods.NAME] tables (as in a grid
    file), whose baselines may be the board's methods. A name in the file replaces an earlier one."""
    path = Path(method_file)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise SuiteError(f"cannot read {path}: {err}") from None
    methods = raw.get("tuning", {}).get("methods") if isinstance(raw.get("tuning"), dict) else None
    if set(raw) != {"tuning"} or set(raw["tuning"]) != {"methods"} or not isinstance(methods, dict) or not methods:
        raise SuiteError(f"{path}: a method file holds [tuning.methods.NAME] tables and nothing else")
    if taken := sorted(set(methods) & set(record["methods"])):
        raise SuiteError(f"{path}: '{taken[0]}' is already a method of the board: give yours another name")
    most = max(len(m.get("recipes", [])) for m in record["methods"].values())
    for name, body in methods.items():
        if not isinstance(body, dict):
            continue  # parse says what is wrong with it
        if not body.get("baseline"):
            raise SuiteError(
                f"{path}: method '{name}' names no baseline: a method added to a board is judged against one of "
                f"its methods ({', '.join(record['methods'])})"
            )
        if len(body.get("recipes", [])) > most:
            raise SuiteError(
                f"{path}: method '{name}' has {len(body['recipes'])} recipes, more than any method of the board "
                f"({most}): recipes are trials chosen without a search, the board's declared before its runs"
            )
    return parse(_table(record, _methods(record["methods"] | earlier) | methods), str(path), record["grid"])


def _methods(recorded: dict) -> dict:
    """Methods as tuning.json records them, as a [tuning] table's methods."""
    return {
        name: {
            **m["fixed"],
            "space": m["space"],
            **_baseline(m),
            **({"recipes": m["recipes"]} if "recipes" in m else {}),
        }
        for name, m in recorded.items()
    }


def _table(record: dict, methods: dict) -> dict:
    """The board's [tuning] table, as its tuning.json records it, with these methods."""
    return {
        **({"rounds": record["rounds"]} if "rounds" in record else {"trials": record["trials"]}),
        **({"version": record["version"]} if "version" in record else {}),
        "tuning_seeds": record["tuning_seeds"],
        "final_seeds": record["final_seeds"],
        "race": record.get("race", False),
        "methods": methods,
        **({"shared": record["shared"]} if "shared" in record else {}),
    }


def check_board(record: dict, board_runs: Path, cells: list[str] = ()) -> None:
    """The board's record and its runs agree in `cells` (all, if none are named: the cells a method is
    added to), or one line says where they do not: every choice follows
    from its protocol (each trial's point as the rounds draw it, on every tuning seed, and the winner
    the rule picks), its final runs are the chosen point's specs on the final seeds, and each of them
    is a finished run under the board, made by the code of today. An edited tuning.json (trials, seeds,
    a budget, a range), deleted or foreign runs would otherwise put a new method under another
    protocol than its baselines', or judge it on fewer seeds without a word."""
    where = str(board_runs / "tuning.json")
    try:
        tuning = parse(_table(record, _methods(record["methods"])), where, record["grid"])
    except SuiteError as err:
        raise SuiteError(f"{where} is not a protocol this suite runs ({err})") from None
    methods, runs = {m.name: m for m in tuning.methods}, _finished_runs(board_runs)
    for choice in record["chosen"]:
        if cells and choice["cell"] not in cells:
            continue
        name = f"cell [{choice['cell']}], method '{choice['method']}'"
        base = record["cells"].get(choice["cell"])
        if base is None:
            raise SuiteError(f"{where}: {name} is chosen in a cell the record does not hold")
        method, tried = methods[choice["method"]], choice["tried"]
        if why := _off_protocol(tuning, method, tried):
            raise SuiteError(f"{where}: {name}: {why}; the board was edited after it ran: rerun it")
        winner = best_of(tried)
        if (choice["chosen"], canonical(choice["settings"])) != (winner["point"], canonical(winner["settings"])):
            raise SuiteError(f"{where}: {name}: the point chosen is not the one the rule picks from its trials")
        specs = [spec_for(base, method, choice["settings"], seed, where) for seed in tuning.final_seeds]
        if not reached(choice) and not choice.get("final_runs"):
            specs = []  # a failed search runs no final seeds (reached's docstring)
        if choice.get("final_runs") != [spec_id(spec) for spec in specs]:
            raise SuiteError(
                f"{where}: {name}: its final runs are not the chosen point's on the final seeds "
                f"{tuning.final_seeds} at the cell's settings (budget included): the record was edited"
            )
        for spec in specs:
            run_dir = runs.get(spec_id(spec))
            if run_dir is None:
                raise SuiteError(
                    f"{board_runs}: {name}: the final run of seed {spec['seed']} ({spec_id(spec)}) is missing or "
                    "unfinished: that row would be judged on fewer seeds than the board drew (a board still being "
                    "run: add your method to the cells it has finished, --experiment)"
                )
            if why := changed(RunDir(run_dir).read_code(), spec):
                raise SuiteError(
                    f"{run_dir} was made by other code of {why}: your method would not run the code its baselines "
                    "ran; add it at the commit its runs name (git_commit in their result.json), or rerun the board"
                )


def _off_protocol(tuning: Tuning, method, tried: list[dict]) -> str | None:
    """How a choice's trials differ from what the protocol draws, or None."""
    if len(tried) != tuning.trials:
        return f"it holds {len(tried)} trials where the protocol runs {tuning.trials}"
    for r in range(len(tuning.rounds)):
        first = tuning.first(r)
        best = best_of(tried[:first])["settings"] if r else None
        for k, point in enumerate(tuning.points(method, r, best), first):
            if tried[k]["point"] != k or canonical(tried[k]["settings"]) != canonical(point):
                return f"trial {k} is not the point its round draws"
    if any(len(t["times"]) != len(tuning.tuning_seeds) for t in tried):
        return f"a trial was not scored on the {len(tuning.tuning_seeds)} tuning seeds"
    return None


def _finished_runs(board_runs: Path) -> dict[str, Path]:
    """The board's finished runs by id (its final runs, read through any links)."""
    runs = {}
    for path in result_files(board_runs):
        result = read_json(path)
        if has_full_spec(result):
            runs[spec_id(result["spec"])] = path.parent  # its spec, not a run_id an edit may have left
    return runs


def earlier_methods(record: dict, final: Path) -> dict:
    """The methods an earlier --add tuned into this root against the same board, as its tuning.json
    records them: they stay on the root's board beside the ones added now (and run on the cells named
    now where they have not run yet)."""
    mine = record_of(final)
    if mine is None or mine.get("grid") != record["grid"]:
        return {}
    return {name: m for name, m in mine["methods"].items() if name not in record["methods"]}


def only_new(whole: Tuning, record: dict) -> Tuning:
    """The protocol with only the methods the board does not have: the ones to run."""
    return dataclasses.replace(whole, methods=[m for m in whole.methods if m.name not in record["methods"]])


def _baseline(method: dict) -> dict:
    return {"baseline": method["baseline"]} if method.get("baseline") else {}


def base_grid(record: dict, cells: list[str], where: str | Path) -> Grid:
    """The board's base cells (those named in `cells`, or all) as a grid of the board's name: each
    cell's name in tuning.json is its experiment, so its runs take the board's labels."""
    known = list(record["cells"])
    if unknown := [name for name in cells if name not in known]:
        raise SuiteError(f"the board has no cell '{unknown[0]}'; its cells: {', '.join(known)}")
    chosen = [name for name in known if not cells or name in cells]
    return Grid(record["grid"], Path(where), [Cell(record["cells"][name], Path(), "", None, name) for name in chosen])


def board_links(board_runs: Path, final: Path) -> list[tuple[Path, Path]]:
    """(run, link) for each final run of the board not yet linked into `final` at the same relative
    place. Anything else in a link's place is refused (before any run): the board would be read from it."""
    out = []
    for result in result_files(board_runs):
        source = result.parent.resolve()
        link = final / result.parent.relative_to(board_runs)
        if link.is_symlink() and link.resolve() == source:
            continue
        if link.exists() or link.is_symlink():
            raise SuiteError(
                f"{link} is not a link to the board's run {source}, and the board's rows would be read from it: "
                "give a --root of your own that holds no other runs"
            )
        out.append((source, link))
    return out


def link_board_runs(board_runs: Path, final: Path) -> None:
    for source, link in board_links(board_runs, final):
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(source, link, target_is_directory=True)


def check_root(root: Path, board: Path) -> None:
    root, board = root.resolve(), Path(board).resolve()
    if root == board or board in root.parents or root in board.parents:
        raise SuiteError(f"--root {root} overlaps the board {board}: give a folder of your own, outside it")
