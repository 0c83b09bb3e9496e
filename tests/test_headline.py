"""The answer one glance away (issue 63): `suite leaderboard ROOT --out OUT --headline README` writes a
tuned board's answer between the headline markers of leaderboards/README.md (three lines, a table
of methods x problems, a figure), every number tuning.md's; the committed README holds what its recorded
command writes; the terminal ends a board with one sentence of its verdicts; legends are never cut off."""

import os
import re
import shutil
import struct
import textwrap

import pytest
from conftest import ONE_POINT, PARITY_FIXED, REPO, chunks_here

from suite.cli import main
from suite.leaderboard.headline import END, FIGURE, headline, recorded_command, verdicts, word
from suite.leaderboard.plots import figure, to_png

# two problems, a baseline and two methods against it, one point each: a tuned board in a minute
FIGHT = (
    'name = "fight"\n'
    + PARITY_FIXED
    + "patience = 40\n"
    + textwrap.dedent("""
    [[experiment]]
    name = "k2"
    [[experiment]]
    name = "k3"
    fixed = { k = 3 }
    """)
    + ONE_POINT
    + textwrap.dedent("""
    [tuning.methods.adamlr]
    opt = "adamlr"
    baseline = "adam"
    space = { lr = [0.01] }
    [tuning.methods.sgd]
    opt = "sgd"
    baseline = "adam"
    space = { lr = [0.05], momentum = [0.9] }
""")
)
MARKERS = "<!-- headline: written by `x`; run it again rather than edit this block -->\n" + END
README = f"# Boards\n\nabove the headline\n\n{MARKERS}\n\nbelow the headline\n"


@pytest.fixture(scope="module")
def tuned_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fight")
    (root / "fight.toml").write_text(FIGHT)
    with chunks_here():
        assert main(["tune", str(root / "fight.toml"), "--root", str(root / "runs"), "--workers", "2"]) == 0
    return root / "runs" / "final"


def block_of(readme_text: str) -> str:
    return readme_text.split("rather than edit this block -->\n", 1)[1].split(END)[0]


def shown_as(row: dict | None) -> str:
    """A verdict of tuning.md as the headline's table shows it: the speed-up and its interval, its
    Holm-adjusted p, then the verdict; a method with no row in a problem (not tuned there), "no row"."""
    if row is None:
        return "no row"
    speedup, verdict = row["speed-up [95% CI]"], word(row["verdict"])
    if verdict == "no verdict":  # with why, up to its first detail
        return "no verdict: " + row["verdict"].split(": ")[1].split(" (")[0].split("; ")[0]
    if speedup == "-":
        return verdict
    return f"{speedup}, p {row['p (Holm)']}: **{verdict}**"


def test_the_headline_gives_tuning_md_s_verdicts_in_three_lines_a_table_and_a_figure(tuned_root, tmp_path, capsys):
    readme, out = tmp_path / "README.md", tmp_path / "tuned"
    readme.write_text(README)
    assert main(["leaderboard", str(tuned_root), "--out", str(out), "--headline", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# Boards\n\nabove the headline\n\n") and text.endswith(f"{END}\n\nbelow the headline\n")
    assert recorded_command(readme) == f"python -m suite leaderboard {tuned_root} --out {out} --headline {readme}"
    lines = block_of(text).strip().splitlines()
    assert lines[0].startswith("**Which methods make grokking come sooner than tuned adam, once every method")
    assert "[`tuned`](tuned/tuning.md): 2 cells (k2, k3), 2 methods against it, 5 final seeds a row" in lines[0]
    per_problem, methods = verdicts((out / "tuning.md").read_text())
    pooled = {m["method"]: m for m in methods}
    assert len(lines[1:3]) == 2 and not lines[3]  # the three lines of the answer, then the table
    faster = [m for m in pooled if word(pooled[m]["verdict"]) == "faster"]
    assert lines[1].startswith("**Faster over every cell where judged: " if faster else "**No method is resolved")
    for method, m in pooled.items():  # every method is named with its verdict over the cells judged
        if method not in faster:
            assert f"{method} {m['speed-up [95% CI]']} (in k2 only)" in lines[2]
    table = [line for line in lines if line.startswith("| ")]
    assert table[0] == "| method | k2 | k3 | over the cells judged |"
    for row in table[1:]:
        method, *by_problem, overall = [c.strip() for c in row.strip("|").split(" | ")]
        for problem, shown in zip(("k2", "k3"), by_problem):
            rows = [r for r in per_problem if r["cell"] == problem and r["method"] == method]
            assert len(rows) <= 1 and shown == shown_as(rows[0] if rows else None)
        # every method was judged in k2 alone, and the table says so
        assert overall == (shown_as(pooled[method]) + " (in k2 only)" if method in pooled else "no verdict")
    assert {row.split(" | ")[0].strip("| ") for row in table[1:]} == {"adamlr", "sgd"}  # the baseline is no row
    # in k3 no adam or sgd trial reached the target: neither has final runs there, and tuning.md says so
    k3_cells = {row.split(" | ")[0].strip("| "): row.split(" | ")[2] for row in table[1:]}
    assert k3_cells == {"sgd": "no verdict: no final runs", "adamlr": "no verdict: adam has no final runs"}
    k3 = {r["method"]: r["verdict"] for r in per_problem if r["cell"] == "k3"}
    assert k3["sgd"] == "no verdict: no final runs: its search reached the target on no tuning seed"
    assert k3["adamlr"] == "no verdict: adam has no final runs: its search reached the target on no tuning seed"
    for method, m in pooled.items():  # the one verdict per method names the cell it left out, and why
        assert m["cells"] == "k2" and m["left out"] == f"k3: {k3[method].removeprefix('no verdict: ')}"
    assert f"![each method's speed-up over its tuned baseline, per cell and over the cells judged]({FIGURE})" in text
    assert (tmp_path / FIGURE).read_bytes().startswith(b"\x89PNG")
    said = capsys.readouterr().out.splitlines()
    assert said[-2].startswith("One verdict per method over every cell (tuning.md), against its tuned baseline: ")
    for method, m in pooled.items():  # judged in k2 alone, which the sentence says as the headline does
        assert f"{method} {word(m['verdict'])} ({m['speed-up [95% CI]']}, in k2 only)" in said[-2]
    before = readme.read_bytes(), (tmp_path / FIGURE).read_bytes()
    assert main(["leaderboard", str(tuned_root), "--out", str(out), "--headline", str(readme)]) == 0
    assert (readme.read_bytes(), (tmp_path / FIGURE).read_bytes()) == before  # again: the same bytes


def test_while_the_board_has_no_runs_the_headline_says_it_is_being_re_run_and_names_the_command(tmp_path, capsys):
    readme, root, out = tmp_path / "README.md", tmp_path / "tuned" / "runs", tmp_path / "tuned"
    readme.write_text(README)
    assert main(["leaderboard", str(root), "--out", str(out), "--headline", str(readme)]) == 0
    block = block_of(readme.read_text())
    assert "is being re-run: its runs land over the coming days" in block
    assert f"\n    python -m suite leaderboard {root} --out {out} --headline {readme}\n" in block
    assert not out.exists() and not (tmp_path / FIGURE).exists()
    assert capsys.readouterr().err.strip() == f"no runs under {root} yet: {readme} says the board is being re-run"


@pytest.mark.parametrize(
    "readme, root, message",
    [
        ("# no markers\n", "tuned", "it needs the markers"),
        (MARKERS.replace(END, "") + "\n", "tuned", "it needs the markers"),
        (README, "tests/fixtures/leaderboard/runs", "has no tuning.json"),
    ],
)
def test_a_readme_without_its_markers_or_an_untuned_root_is_one_line_and_writes_nothing(
    tmp_path, capsys, tuned_root, readme, root, message
):
    (tmp_path / "README.md").write_text(readme)
    root = tuned_root if root == "tuned" else REPO / root
    argv = ["leaderboard", str(root), "--out", str(tmp_path / "board"), "--headline", str(tmp_path / "README.md")]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and message in err[0]
    assert (tmp_path / "README.md").read_text() == readme and not (tmp_path / "board").exists()


def test_the_leaderboards_readme_holds_what_its_recorded_command_writes(tmp_path, monkeypatch):
    # the same command run again over the committed board writes the same block (and figure): a board
    # committed without its headline, or a headline edited by hand, fails here
    command = recorded_command(REPO / "leaderboards" / "README.md")
    argv = command.split()[3:]
    out = argv[argv.index("--out") + 1]
    # the command as typed from the repository root, in a copy whose boards are links to the committed ones
    for board in (REPO / "leaderboards").iterdir():
        if board.is_dir() and board.name != os.path.basename(out):
            (tmp_path / "leaderboards").mkdir(exist_ok=True)
            (tmp_path / "leaderboards" / board.name).symlink_to(board)
    (tmp_path / out).mkdir(parents=True)
    if (REPO / out / "runs").is_dir():
        (tmp_path / out / "runs").symlink_to(REPO / out / "runs")
    shutil.copy(REPO / "leaderboards" / "README.md", tmp_path / "leaderboards" / "README.md")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    for name in ("README.md", FIGURE):
        written, committed = tmp_path / "leaderboards" / name, REPO / "leaderboards" / name
        assert written.exists() == committed.exists()
        if committed.exists():
            assert written.read_bytes() == committed.read_bytes(), f"leaderboards/{name} is not what {command} writes"


@pytest.mark.parametrize("root", ["tests/fixtures/leaderboard/runs", "leaderboards/adamlr/runs"])
def test_the_terminal_ends_a_board_with_one_sentence_of_its_verdicts(tmp_path, capsys, root):
    assert main(["leaderboard", str(REPO / root), "--out", str(tmp_path / "board")]) == 0
    *_, sentence, index = capsys.readouterr().out.splitlines()
    assert index == str(tmp_path / "board" / "index.md")  # still the last line
    pages = "".join(p.read_text() for p in (tmp_path / "board").glob("*.md"))
    judged = re.findall(r"\| (faster|slower|not resolved \(n = \d+\)) \|", pages)
    unresolved = sum(v.startswith("not resolved") for v in judged)
    assert unresolved and sentence.startswith("Verdicts: ")
    assert sentence.endswith(f"{unresolved} row{'s' * (unresolved != 1)} not resolved.")
    named = re.findall(r" (?:faster|slower) than \S+ in ", sentence)  # "adamlr c=10 faster than adam in modular / mlp"
    assert len(named) == min(len(judged) - unresolved, 4)


@pytest.mark.parametrize("label, grows", [("adam", False), ("adamlr c=10 lr=0.01 weight_decay=0.001 " * 5, True)])
def test_a_legend_wider_than_its_figure_is_never_cut_off(label, grows):
    fig = figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2], label=label)
    ax.plot([1, 2], [2, 1], label=label + " again")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    width, height = struct.unpack(">II", to_png(fig)[16:24])  # the PNG header's size
    assert (width > 400) == grows and height >= 300  # 4 x 3 inches at 100 dpi, grown only to hold the legend


def test_the_recipe_check_s_table_under_the_verdicts_is_not_read_as_verdicts():
    tuning_md = textwrap.dedent("""
        ## Verdicts on the final seeds

        | cell | method | against | speed-up [95% CI] | verdict |
        |---|---|---|---:|---|
        | add | adamlr | adam | 2.00x [1.50x, 3.00x] | faster |

        ### Recipe check

        | cell | tuned method | untuned recipe | seeds |
        |---|---|---|---:|
        | add | adam | adam lr=0.01 | 10 |

        ## One verdict per method

        | method | against | speed-up [95% CI] | verdict |
        |---|---|---:|---|
        | adamlr | adam | 2.00x [1.50x, 3.00x] | faster |
        """)
    per_problem, methods = verdicts(tuning_md)
    row = {"cell": "add", "method": "adamlr", "against": "adam", "speed-up [95% CI]": "2.00x [1.50x, 3.00x]"}
    assert per_problem == [{**row, "verdict": "faster"}]
    assert [m["method"] for m in methods] == ["adamlr"]


def test_the_answer_names_the_verdicts_of_single_cells_and_where_a_tuning_failed(tmp_path):
    # the verdicts over the cells are all "not resolved": what single cells resolved, and the cells
    # that gave none because a recipe beat the tuned baseline, must still be in the three lines
    (tmp_path / "board").mkdir()
    (tmp_path / "board" / "tuning.md").write_text(
        textwrap.dedent("""
        ## Verdicts on the final seeds

        | cell | method | grokked | against | speed-up [95% CI] | p (Holm) | verdict |
        |---|---|---:|---|---:|---:|---|
        | div | adam | 10/10 | - | - | - | - |
        | div | muon | 10/10 | adam | 0.16x [0.15x, 0.18x] | 0.018 | slower |
        | div | sgd | 10/10 | adam | 0.50x [0.40x, 0.60x] | 0.018 | slower; sgd's winner at an edge |
        | div | ortho | 10/10 | adam | 2.00x [1.50x, 3.00x] | 0.018 | faster |
        | add | adam | 7/10 | - | - | - | - |
        | add | muon | 10/10 | adam | - | - | no verdict: adam's tuning failed: adam lr=0.01 beats tuned adam (1.84x) |
        | add | sgd | 10/10 | adam | - | - | no verdict: adam's tuning failed: adam lr=0.01 beats tuned adam (1.84x) |
        | add | ortho | 10/10 | adam | - | - | no verdict: adam's tuning failed: adam lr=0.01 beats tuned adam (1.84x) |

        ## One verdict per method

        | method | against | cells | speed-up [95% CI] | p (Holm) | verdict |
        |---|---|---|---:|---:|---|
        | muon | adam | div | 0.16x [0.15x, 0.18x] | 0.2 | not resolved (n = 10) |
        | sgd | adam | div | 0.50x [0.40x, 0.60x] | 0.2 | not resolved (n = 10) |
        | ortho | adam | div | 2.00x [1.50x, 3.00x] | 0.2 | not resolved (n = 10) |
        """)
    )
    block = headline(tmp_path / "README.md", tmp_path / "board", "cmd")[0]
    answer = next(line for line in block.splitlines() if line.startswith("Not resolved: "))
    assert answer.endswith(
        " Cell by cell: ortho faster in div; muon, sgd slower in div. No verdict where an untuned recipe beats the "
        "tuned row (its tuning failed): adam in add."
    )


def test_a_row_or_baseline_missing_some_of_its_final_seeds_gets_no_verdict(tuned_root, tmp_path):
    # a campaign still running: a verdict on the seeds that happened to finish first is no verdict
    import json

    from suite.leaderboard.collect import collect
    from suite.leaderboard.tuned import judge
    from suite.results.tuning_record import record_of

    root = tmp_path / "final"
    shutil.copytree(tuned_root, root)
    record = record_of(root)
    k2 = {c["method"]: c for c in record["chosen"] if c["cell"] == "k2"}
    whole = {v.method: v for v in judge(collect(root), record).verdicts if v.problem == "k2"}
    assert whole["adamlr"].verdict and whole["sgd"].verdict and not whole["adamlr"].withheld
    run_dirs = {json.loads(p.read_text())["run_id"]: p.parent for p in root.rglob("result.json")}
    shutil.rmtree(run_dirs[k2["adamlr"]["final_runs"][3]])
    part = {v.method: v for v in judge(collect(root), record).verdicts if v.problem == "k2"}
    assert part["adamlr"].withheld == "final runs not all finished (adamlr 4 of 5)" and not part["adamlr"].verdict
    assert part["sgd"].verdict and not part["sgd"].withheld  # its own rows are whole
    shutil.rmtree(run_dirs[k2["adam"]["final_runs"][0]])
    part = {v.method: v for v in judge(collect(root), record).verdicts if v.problem == "k2"}
    assert part["adamlr"].withheld == "final runs not all finished (adamlr 4 of 5, adam 4 of 5)"
    assert part["sgd"].withheld == "final runs not all finished (adam 4 of 5)"


def test_the_verdicts_name_the_clock_their_cost_was_timed_by(tuned_root, tmp_path):
    # a board's cost.json from before the clock was named (the wall clock) must not read as CPU time
    import json

    from suite.leaderboard import generate

    root = tmp_path / "final"
    shutil.copytree(tuned_root, root)
    generate(root, tmp_path / "now")
    assert "timed by the thread's CPU time, the same machine" in (tmp_path / "now" / "tuning.md").read_text()
    older = json.loads((root / "cost.json").read_text())
    for entry in [older, *older["specs"].values()]:
        entry.pop("clock")
    (root / "cost.json").write_text(json.dumps(older))
    generate(root, tmp_path / "older")
    page = (tmp_path / "older" / "tuning.md").read_text()
    assert "timed by the wall clock, the same machine" in page and "CPU time" not in page


def test_the_figure_s_legend_lists_every_cell_in_the_table_s_order_and_says_which_has_no_verdict(monkeypatch):
    from suite.leaderboard import headline as module

    monkeypatch.setattr(
        "suite.leaderboard.plots.to_png", lambda fig: [t.get_text() for t in fig.legends[0].get_texts()]
    )
    per_problem = [
        {"cell": "k1", "method": "m", "speed-up [95% CI]": "-"},  # withheld: no mark
        {"cell": "k2", "method": "m", "speed-up [95% CI]": "1.50x [1.20x, 1.90x]"},
    ]
    pooled = [{"method": "m", "speed-up [95% CI]": "1.50x [1.20x, 1.90x]"}]
    labels = module.figure(["k1", "k2"], per_problem, pooled, ["m"])
    assert labels == ["k1 (no verdict)", "k2", "over the cells judged"]
