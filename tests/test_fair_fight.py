"""The fair fight's protocol (suite/launch/tuning.py, suite/engine/race.py): shared spaces drawn as
common points, winners flagged at an edge of their space, final runs watched past the hold, and a
race that stops trials which can no longer win without changing the winner."""

import json
import textwrap
import tomllib

import pytest
from conftest import PARITY_FIXED

from suite import SuiteError
from suite.cli import main
from suite.launch.grid import load
from suite.launch.spaces import parse
from suite.launch.tuning import check_cells
from suite.leaderboard import generate

FIGHT = (
    'name = "fight"\n'
    + PARITY_FIXED
    + "patience = 40\n"
    + textwrap.dedent("""
    [tuning]
    trials = 6
    tuning_seeds = [100, 101]
    final_seeds = [0, 1, 2, 3, 4]
    race = RACE
    [tuning.shared]
    lr = { log = [0.0001, 0.3] }
    weight_decay = { log = [0.0001, 1.0] }
    [tuning.methods.adamw]
    opt = "adamw"
    [tuning.methods.adamwlr]
    opt = "adamwlr"
    baseline = "adamw"
    space = { c = { log = [1, 30] } }
    [tuning.methods.ortho]
    opt = "adamw"
    filter = "orthograd"
    weight_decay = 0.0
    baseline = "adamw"
""")
)


def _tuning(text: str = FIGHT, name: str = "fight"):
    return parse(tomllib.loads(text.replace("RACE", "true"))["tuning"], "fight.toml", name)


def test_common_points_are_the_same_for_every_method_and_a_method_that_fixes_a_shared_setting_keeps_it():
    tuning = _tuning()
    adamw, adamwlr, ortho = (tuning.points(m) for m in tuning.methods)
    assert len(adamw) == len(adamwlr) == len(ortho) == 6
    for a, b, o in zip(adamw, adamwlr, ortho):
        assert set(a) == {"lr", "weight_decay"} and set(b) == {"lr", "weight_decay", "c"} and set(o) == {"lr"}
        assert a["lr"] == b["lr"] == o["lr"] and a["weight_decay"] == b["weight_decay"]  # paired point by point
        assert 1e-4 <= a["lr"] <= 0.3 and 1 <= b["c"] <= 30
    assert len({p["lr"] for p in adamw}) == 6  # quasi-random: every point a different lr
    assert adamw == _tuning().points(tuning.methods[0])  # the same on every call and machine
    assert adamw != _tuning(name="other").points(tuning.methods[0])  # seeded by the grid


def test_a_method_cannot_search_a_shared_setting_in_a_range_of_its_own():
    text = FIGHT.replace("space = { c = { log = [1, 30] } }", "space = { lr = { log = [0.001, 1.0] } }")
    with pytest.raises(SuiteError, match="searches 'lr' in a space of its own, but it is shared"):
        _tuning(text)


def test_a_setting_near_a_bound_of_its_space_is_flagged_on_its_own_scale():
    tuning = _tuning()
    adamwlr = tuning.methods[1]
    edges = tuning.edges(adamwlr, {"lr": 0.25, "weight_decay": 0.01, "c": 1.2})
    assert edges == ["lr at 0.98 of its log range", "c at 0.05 of its log range"]
    assert tuning.edges(adamwlr, {"lr": 0.005, "weight_decay": 0.01, "c": 5.0}) == []


def test_final_runs_that_stop_before_twice_the_hold_past_their_grok_step_are_refused(tmp_path):
    (tmp_path / "g.toml").write_text(FIGHT.replace("RACE", "true").replace("patience = 40", "patience = 30"))
    grid = load(tmp_path / "g.toml")
    with pytest.raises(SuiteError, match=r"stops its runs 30 steps after their grok step .* 2 x train.hold = 40"):
        check_cells(grid, parse(grid.tuning, "g.toml", grid.name))


def test_the_race_stops_trials_that_cannot_win_and_never_changes_the_winner(tmp_path, capsys):
    chosen = {}
    for race in ("false", "true"):
        (tmp_path / f"{race}.toml").write_text(FIGHT.replace("RACE", race))
        root = tmp_path / race
        assert main(["tune", str(tmp_path / f"{race}.toml"), "--root", str(root), "--workers", "2"]) == 0
        record = json.loads((root / "final" / "tuning.json").read_text())
        chosen[race] = {
            (c["method"], c["chosen"], str(c["settings"]), c["tried"][c["chosen"]]["median_time"])
            for c in record["chosen"]
        }
        stops = [json.loads(p.read_text())["stop_reason"] for p in (root / "tuning").rglob("result.json")]
        assert ("raced" in stops) == (race == "true"), stops  # the race ran, so the test could fail
    assert chosen["true"] == chosen["false"]
    generate(tmp_path / "true" / "final", tmp_path / "board")
    page = (tmp_path / "board" / "tuning.md").read_text()
    assert "The race stopped each trial" in page and "(raced)" in page
    assert "Shared by every method" in page and "ortho fix weight_decay" in page
    common = page.split("## Common points")[1].split("## Verdicts")[0]
    header = next(line for line in common.splitlines() if line.startswith("| point"))
    assert header.split("|")[2:-1] == [" lr ", " weight_decay ", " adamw ", " adamwlr ", " ortho "]
    rows = [line for line in common.splitlines() if line.startswith("| ") and line[2].isdigit()]
    record = json.loads((tmp_path / "true" / "final" / "tuning.json").read_text())
    adamw = next(c for c in record["chosen"] if c["method"] == "adamw")
    assert len(rows) == 6 and all(f"{t['settings']['lr']:.3g}"[:4] in row for t, row in zip(adamw["tried"], rows))
    assert "| delay [range] |" in page
    ortho = next(line for line in page.split("## Verdicts")[1].splitlines() if line.startswith("| fight | ortho |"))
    assert ortho.split("|")[3].strip().endswith("weight_decay=0")  # the shared setting its definition fixes


@pytest.mark.parametrize(
    "delay, time, edges, note",
    [
        (0.0, 500.0, [], ["no delay to shorten"]),
        (50.0, 500.0, [], ["no delay to shorten"]),
        (300.0, 500.0, [], []),
        (float("nan"), float("inf"), [], []),
        (300.0, 500.0, ["lr at 0.98 of its log range"], ["adamw's winner at an edge"]),
    ],
)
def test_a_verdict_says_when_there_was_no_delay_to_shorten_or_a_winner_sat_at_an_edge(delay, time, edges, note):
    from suite.leaderboard.tuned import _notes

    base = {"delay_median": delay, "time_to_target": time}
    assert _notes(base, [{"method": "mine", "edges": []}, {"method": "adamw", "edges": edges}]) == note


# Version 3's search: rounds that adapt around the best trial so far, recipes first, decay drawn per step
ROUNDS = (
    'name = "rounds"\n'
    + PARITY_FIXED
    + "patience = 40\n"
    + textwrap.dedent("""
    [tuning]
    rounds = [
        { search = "coarse", trials = 3 },
        { search = "refine", trials = 2, width = 0.1 },
        { search = "own", trials = 2, width = 0.05 },
    ]
    tuning_seeds = [100, 101]
    final_seeds = FINAL
    race = true
    [tuning.shared]
    lr = { log = [0.0001, 0.3] }
    weight_decay = { per_step = [1e-6, 0.1] }
    decoupled_weight_decay = [false, true]
    [tuning.methods.adam]
    opt = "adam"
    recipes = [{ lr = 0.01, weight_decay = 0.001, decoupled_weight_decay = false }]
    [tuning.methods.adamlr]
    opt = "adamlr"
    baseline = "adam"
    space = { c = { log = [1, 30] } }
    recipes = [{ lr = 0.01, weight_decay = 0.001, decoupled_weight_decay = false, c = 10.0 }]
""")
)


def _searches(root) -> dict:
    """(method) -> its trials' (round, settings) and the winner, from a tune's record."""
    record = json.loads((root / "final" / "tuning.json").read_text())
    return {
        c["method"]: ([(t["round"], t["settings"]) for t in c["tried"]], c["chosen"], c["settings"])
        for c in record["chosen"]
    }


def test_rounds_search_around_the_best_so_far_and_an_interrupted_search_draws_the_same_trials(tmp_path, monkeypatch):
    import math

    from suite.launch import submit

    (tmp_path / "g.toml").write_text(ROUNDS.replace("FINAL", "[0, 1, 2, 3, 4]"))
    whole = tmp_path / "whole"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(whole), "--workers", "2"]) == 0
    searches = _searches(whole)
    shared = {"lr": ("log", 1e-4, 0.3), "weight_decay": ("per_step", 1e-6, 0.1)}
    for method, (trials, _, _) in searches.items():
        assert [r for r, _ in trials] == [0, 0, 0, 1, 1, 2, 2]
        assert trials[0][1] == _tuning(ROUNDS.replace("FINAL", "[0, 1, 2, 3, 4]")).methods[0].recipes[0] | (
            {"c": 10.0} if method == "adamlr" else {}
        )  # the recipe is the first trial
        record = json.loads((whole / "final" / "tuning.json").read_text())
        tried = next(c for c in record["chosen"] if c["method"] == method)["tried"]
        first = min(tried[:3], key=lambda t: (t["median_time"] or math.inf, -t["median_best_val"], t["point"]))
        for _, point in trials[3:5]:  # refine: within 0.1 of each shared scale around round 1's best
            assert point["decoupled_weight_decay"] == first["settings"]["decoupled_weight_decay"]
            for key, (_, lo, hi) in shared.items():
                scale = math.log(hi / lo)
                value = point[key] * (point["lr"] if key == "weight_decay" else 1)
                centre = first["settings"][key] * (first["settings"]["lr"] if key == "weight_decay" else 1)
                assert abs(math.log(value / centre)) <= 0.1 * scale + 1e-3
        best = min(tried[:5], key=lambda t: (t["median_time"] or math.inf, -t["median_best_val"], t["point"]))
        if method == "adamlr":  # own: c over its space, the shared settings the best's
            base = {k: v for k, v in best["settings"].items() if k != "c"}
            assert all({k: v for k, v in p.items() if k != "c"} == base for _, p in trials[5:])
            assert trials[5][1]["c"] != trials[6][1]["c"]
    # interrupted after the first round: the next call draws the same later rounds, picks the same winners
    calls = []
    real = submit.run_grid

    def first_round_only(args, grid, root):
        calls.append(grid.name)
        return real(args, grid, root) if len(calls) == 1 else 0

    monkeypatch.setattr(submit, "run_grid", first_round_only)
    part = tmp_path / "part"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(part), "--workers", "2"]) == 0
    assert not (part / "final" / "tuning.json").exists()  # stopped before the second round
    monkeypatch.setattr(submit, "run_grid", real)
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(part), "--workers", "2"]) == 0
    assert _searches(part) == searches


def test_every_method_of_the_headline_board_runs_its_published_recipes_first():
    from pathlib import Path

    raw = tomllib.loads((Path(__file__).parents[1] / "suite" / "grids" / "tuned.toml").read_text())
    tuning = parse(raw["tuning"], "tuned.toml", "tuned")
    assert tuning.trials == 14 and len(tuning.tuning_seeds) == 2 and len(tuning.final_seeds) == 10
    for method in tuning.methods:
        assert method.recipes, f"{method.name} declares no recipe"
        assert tuning.points(method)[: len(method.recipes)] == method.recipes
    adam = next(m for m in tuning.methods if m.name == "adam")
    assert {"lr": 0.01, "weight_decay": 0.001, "decoupled_weight_decay": False} in adam.recipes


def test_a_recipe_must_give_every_searched_setting_inside_its_space():
    text = ROUNDS.replace("FINAL", "[0, 1, 2, 3, 4]")
    with pytest.raises(SuiteError, match="missing c"):
        _tuning(text.replace(", c = 10.0 }", " }"))
    with pytest.raises(SuiteError, match="its recipe's weight_decay = 100.0 lies outside its space"):
        _tuning(text.replace("lr = 0.01, weight_decay = 0.001,", "lr = 0.01, weight_decay = 100.0,", 1))
    with pytest.raises(SuiteError, match="the first round, and only the first, is coarse"):
        _tuning(text.replace('search = "refine"', 'search = "coarse"'))


def test_an_untuned_recipe_faster_than_a_tuned_row_withholds_its_verdict(tmp_path):
    # six final seeds (five cannot carry a verdict: p >= 0.0625); the untuned "recipe" is the tuned adam
    # runs made twice as fast, in a root of their own
    import shutil

    (tmp_path / "g.toml").write_text(ROUNDS.replace("FINAL", "[0, 1, 2, 3, 4, 5]"))
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--workers", "2"]) == 0
    record = json.loads((root / "final" / "tuning.json").read_text())
    adam = next(c for c in record["chosen"] if c["method"] == "adam")
    recipe = tmp_path / "untuned"
    for result in (root / "final").rglob("result.json"):
        if json.loads(result.read_text())["run_id"] in adam["final_runs"]:
            copy = recipe / result.parent.name
            shutil.copytree(result.parent, copy)
            lines = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]
            faster = "".join(json.dumps(r | {"step": r["step"] // 2}) + "\n" for r in lines)  # every step halved
            (copy / "metrics.jsonl").write_text(faster)
    generate(root / "final", tmp_path / "board", untuned=(recipe,))
    page = (tmp_path / "board" / "tuning.md").read_text()
    assert "### Recipe check" in page
    verdicts = page.split("## Verdicts on the final seeds")[1].split("###")[0]
    adamlr = next(line for line in verdicts.splitlines() if line.startswith("| rounds | adamlr |"))
    assert "no verdict: tuning failed: adam " in adamlr and "faster than tuned adam" in adamlr
    assert "--untuned" in (tmp_path / "board" / "index.md").read_text()
    generate(root / "final", tmp_path / "plain")  # no untuned roots: no check, a verdict word
    plain = (tmp_path / "plain" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    row = next(line for line in plain.splitlines() if line.startswith("| rounds | adamlr |"))
    assert "tuning failed" not in row and row.rstrip(" |").split("; ")[0].split("| ")[-1].startswith(
        ("faster", "slower", "not resolved")
    )


def test_a_seed_whose_stack_has_not_begun_bounds_its_trial_by_nothing():
    # trial T: seed 100 below the target at step 3,000, seed 101 in a later stack of this process (a
    # resume can split a trial's seeds so), not evaluated yet; rival R finished at 2,000 on both seeds.
    # T's median can still end below 2,000 (seed 101 may grok at 1,000): it has not lost.
    from types import SimpleNamespace as NS

    from suite.engine.milestones import Milestones
    from suite.engine.race import Race

    race = {"trial": ["t100", "t101"], "rivals": [["r100", "r101"]]}

    def member(run_dir, record=None, result=None):
        cell = NS(run_dir=run_dir, race=race)
        return NS(cell=cell, record=record, result=result, milestones=Milestones(0.99, 0.99, 0))

    rivals = [member(d, result={"grok_step": 2000}) for d in ("r100", "r101")]
    evaluated, waiting = member("t100", record={"step": 3000}), member("t101")
    assert not Race([*rivals, evaluated, waiting]).lost(evaluated)
    waiting.record = {"step": 2500}  # once it is below the target past the bar too, the trial has lost
    assert Race([*rivals, evaluated, waiting]).lost(evaluated)
