"""The headline answer at the top of leaderboards/README.md, written from a tuned board (`suite
leaderboard ROOT --out OUT --headline README`): three lines that say which methods made grokking come
sooner once every method was tuned alike, one table of methods x problems of speed-ups with their
intervals and verdicts, and one figure of them, each method under the one name its [tuning] table gives it.

Every number is tuning.md's, as the board wrote it (the per-problem verdicts, Holm-adjusted over the
board, and the one verdict per method over the problems where it was judged: suite/leaderboard/studies/tuning.py), read
back from its two tables, so the headline never says what the board does not. Where the board has
no runs yet, the block says the board is being re-run and names the command that fills it. The block
sits between two markers in the README; the rest of the README is left as it is. What it writes calls
a problem a cell, as tuning.md's columns do (r["cell"]: a problem's name); a cell is otherwise a
Markdown table's (_cells, a verdict cell).
"""

from __future__ import annotations

import itertools
import math
import os
import re
from pathlib import Path

from suite.errors import SuiteError
from suite.leaderboard.tables import md_table
from suite.leaderboard.tuned import FAILED
from suite.results.rundir import write_atomic

BEGIN = "<!-- headline: written by `{command}`; run it again rather than edit this block -->"
END = "<!-- end of the headline -->"
BEGIN_PATTERN = re.compile(r"<!-- headline: written by `([^`]*)`; run it again rather than edit this block -->")
FIGURE = "headline.png"  # beside the README
PER_PROBLEM, PER_METHOD = "## Verdicts on the final seeds", "## One verdict per method"
WORDS = ("faster", "slower", "not resolved", "no verdict")  # a verdict cell's first words, in that order


def write_headline(readme: str | Path, board: str | Path | None, command: str) -> list[Path]:
    """Put the headline of the board written in `board` (None: its runs have not landed) between the
    README's markers, and its figure beside the README; returns the files written."""
    readme = Path(readme)
    text = check_readme(readme)
    block, png = headline(readme, board, command)
    start, end = text.index(BEGIN_PATTERN.search(text).group(0)), text.index(END)
    written = []
    if png is not None:
        write_atomic(readme.parent / FIGURE, png)
        written.append(readme.parent / FIGURE)
    write_atomic(readme, text[:start] + block + text[end + len(END) :])
    return [readme, *written]


def recorded_command(readme: str | Path) -> str:
    """The command that wrote the README's headline block (its first marker records it)."""
    return BEGIN_PATTERN.search(check_readme(Path(readme))).group(1)


def check_readme(readme: Path) -> str:
    """The README's text, once it is known to hold the headline's markers (checked before a board is written)."""
    if not readme.is_file():
        raise SuiteError(f"--headline {readme}: no such file (a README with the headline's markers)")
    text = readme.read_text()
    if len(BEGIN_PATTERN.findall(text)) != 1 or text.count(END) != 1 or text.index(END) < text.find("<!-- headline"):
        raise SuiteError(
            f"--headline {readme}: it needs the markers '{BEGIN.format(command='...')}' and '{END}', once each "
            "and in that order, where the headline goes"
        )
    return text


def headline(readme: Path, board: str | Path | None, command: str) -> tuple[str, bytes | None]:
    """The block (markers included) and its figure (None while the board has no runs)."""
    out = Path(board if board is not None else _out_of(command))
    link = Path(os.path.relpath(out.resolve(), readme.parent.resolve())).as_posix()
    if board is None or not (out / "tuning.md").is_file():
        return _block(command, [_being_rerun(link, command)]), None
    per_problem, methods = verdicts((out / "tuning.md").read_text())
    if not per_problem:
        return _block(command, [_being_rerun(link, command)]), None
    names = list(dict.fromkeys(r["cell"] for r in per_problem))
    judged = [
        m
        for m in dict.fromkeys(r["method"] for r in per_problem)
        if any(r["against"] != "-" for r in _of(per_problem, m))
    ]
    baselines = sorted({r["against"] for r in per_problem if r["against"] != "-"})
    lines = [
        _answer(link, names, per_problem, methods, judged, baselines),
        "",
        _table(names, per_problem, methods, judged),
        f"![each method's speed-up over its tuned baseline, per cell and over the cells judged]({FIGURE})\n",
        "Speed-up: the tuned baseline's median time to target (held grok step, a failed seed counting as infinity) "
        "over the tuned method's, on the final seeds, with its 95% interval and Holm-adjusted p; `faster` / `slower` "
        "only when the interval lies off 1 and that p is below 0.05, its test pointing the same way; over the cells "
        "judged: the geometric mean of the cells' speed-ups, where a method had a verdict. Every number is "
        f"[tuning.md]({link}/tuning.md)'s, "
        "where the search, each row's settings, its cost and its p-values are.",
    ]
    return _block(command, lines), figure(names, per_problem, methods, judged)


def verdicts(tuning_md: str) -> tuple[list[dict], list[dict]]:
    """tuning.md's per-problem verdicts and its one verdict per method, as rows keyed by column."""
    return _table_rows(tuning_md, PER_PROBLEM), _table_rows(tuning_md, PER_METHOD)


def _table_rows(text: str, heading: str) -> list[dict]:
    """The first Markdown table under `heading`, as dicts (header -> cell); the tables of its
    subsections (the recipe check's, under the verdicts) are not its rows."""
    if heading not in text:
        return []
    section = text.split(heading, 1)[1].split("\n## ", 1)[0].splitlines()
    start = next((i for i, line in enumerate(section) if line.startswith("|")), len(section))
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), section[start:]))
    if len(lines) < 2:
        return []
    header = _cells(lines[0])
    return [dict(zip(header, _cells(line))) for line in lines[2:]]


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells (md_table escapes a | inside a cell as \\|)."""
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def word(verdict: str) -> str:
    """A verdict cell's verdict: faster, slower, not resolved (n = k) or no verdict, without what it
    is read with (after '; ') or why there is none (after ':')."""
    return verdict.split("; ")[0].split(":")[0] if verdict not in ("", "-") else "-"


def _of(rows: list[dict], method: str) -> list[dict]:
    return [r for r in rows if r["method"] == method]


def _answer(link, names, per_problem, methods, judged, baselines) -> str:
    """Three lines: the question and the board, the methods found faster, the rest."""
    compared = [r for r in per_problem if r["speed-up [95% CI]"] != "-"] or per_problem  # rows judged
    seeds = sorted({int(r["grokked"].split("/")[1]) for r in compared if "/" in r["grokked"]})
    against = " / ".join(f"tuned {b}" for b in baselines) or "a tuned baseline"
    by_word = {w: [] for w in WORDS}
    for method in judged:
        pooled = next((m for m in methods if m["method"] == method), None)
        if pooled is None:
            by_word["no verdict"].append(f"{method} (in every cell where it ran)")
        else:
            w = word(pooled["verdict"])
            said = f"{method} {pooled['speed-up [95% CI]']}{_only(pooled, names)}"
            by_word[next(k for k in WORDS if w.startswith(k))].append(said)
    faster = by_word["faster"]
    rest = [f"{w.capitalize()}: {', '.join(found)}" for w, found in by_word.items() if found and w != "faster"]
    third = (
        ("; ".join(rest) + " (speed-up over the cells judged [95% CI]).") if rest else "Every method judged is faster."
    )
    return "\n".join(
        [
            f"**Which methods make grokking come sooner than {against}, once every method is tuned alike?** "
            f"The fair fight, [`{link}`]({link}/tuning.md): {len(names)} cell{'s' * (len(names) > 1)} "
            f"({', '.join(names)}), {len(judged)} method{'s' * (len(judged) != 1)} against it, "
            f"{' / '.join(map(str, seeds))} final seeds a row.  ",
            ("**Faster over every cell where judged: " + ", ".join(faster) + ".**  ")
            if faster
            else "**No method is resolved faster over the cells where it was judged.**  ",
            " ".join([third, *_cell_by_cell(names, per_problem, judged)]),
        ]
    )


def _cell_by_cell(names, per_problem, judged) -> list[str]:
    """What the answer over the cells leaves out: the verdicts given in single cells, and the cells
    where a tuned row lost to an untuned recipe of its family (no verdict there: tuning.md's check)."""
    resolved, failed = [], {}  # failed: tuned method -> the cells where its tuning failed
    for cell in names:
        rows = [r for r in per_problem if r["cell"] == cell]
        for w in ("faster", "slower"):
            found = [r["method"] for r in rows if r["method"] in judged and word(r["verdict"]) == w]
            resolved += [f"{', '.join(found)} {w} in {cell}"] if found else []
        for name in re.findall(r"(\S+)" + re.escape(FAILED), " ".join(r["verdict"] for r in rows)):
            failed.setdefault(name, {})[cell] = None
    sentences = [f"Cell by cell: {'; '.join(resolved)}."] if resolved else []
    if failed:
        where = "; ".join(f"{name} in {', '.join(cells)}" for name, cells in failed.items())
        sentences.append(f"No verdict where an untuned recipe beats the tuned row (its tuning failed): {where}.")
    return sentences


def _table(names, per_problem, methods, judged) -> str:
    rows = []
    for method in judged:
        by_problem = {r["cell"]: r for r in _of(per_problem, method)}
        pooled = next((m for m in methods if m["method"] == method), None)
        rows.append(
            [
                method,
                *(_cell_text(by_problem[c]) if c in by_problem else "no row" for c in names),
                _cell_text(pooled) + _only(pooled, names) if pooled else "no verdict",
            ]
        )
    return md_table(["method", *names, "over the cells judged"], rows, right=set())


def _cell_text(row: dict) -> str:
    """A verdict cell of the table: a row's speed-up, its Holm-adjusted p and its verdict; "no verdict"
    where it has none, with why in short ("no verdict: adam's tuning failed"; tuning.md says it in full)."""
    speedup, verdict = row["speed-up [95% CI]"], word(row["verdict"])
    if verdict == "no verdict":
        why = row["verdict"].removeprefix("no verdict: ")
        return verdict if why == row["verdict"] else "no verdict: " + re.split(r": | \(|; ", why)[0]
    if speedup == "-":
        return "no verdict" if verdict == "-" else verdict
    return f"{speedup}, p {row['p (Holm)']}: **{verdict}**"


def _only(pooled: dict, names: list[str]) -> str:
    """ " (in a, b only)" where a method's verdict over the cells judged leaves some of the board's out."""
    cells = pooled["cells"].split(", ")
    return "" if set(names) <= set(cells) else f" (in {', '.join(cells)} only)"


def _being_rerun(link: str, command: str) -> str:
    return (
        f"**The headline board, `{link}/`, is being re-run: its runs land over the coming days, and until they do "
        "this page states no answer.** It is the fair fight: every method tuned alike (the same trials over the same "
        "shared space, on tuning seeds the final rows never use), each winner rerun on fresh seeds. Once its runs "
        "are committed, this command writes here three lines of answer, one table of methods x cells with "
        f"speed-ups, intervals and verdicts, and one figure:\n\n    {command}"
    )


def _out_of(command: str) -> str:
    """The board's folder in a leaderboard command: its --out."""
    return re.search(r"--out (\S+)", command).group(1)


def _block(command: str, lines: list[str]) -> str:
    return "\n".join([BEGIN.format(command=command), "", *lines, "", END])


def _number(text: str) -> float:
    return math.inf if text == "inf" else float(text.rstrip("x"))


def _interval(text: str) -> tuple[float, float, float] | None:
    """'2.04x [1.29x, 3.24x]' -> (2.04, 1.29, 3.24); None for '-'."""
    found = re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", text)
    return None if found is None or found.group(1) == "-" else tuple(_number(x) for x in found.groups())


def figure(names, per_problem, methods, judged) -> bytes | None:
    """Per method, each problem's speed-up with its 95% interval (a colour per problem) and, below them,
    the one over the problems judged (black diamond), on a log axis around 1; the legend lists every
    problem in the table's order, one where no method has a mark saying so."""
    from matplotlib.lines import Line2D

    from suite.leaderboard.plots import figure as new_figure
    from suite.leaderboard.plots import style, to_png

    if not judged:
        return None
    fig = new_figure(figsize=(8, 1.6 + 0.32 * len(judged) * (len(names) + 1.5)))
    ax = fig.subplots()
    y, ticks, clip, marked = 0.0, [], (1 / 64, 64), set()
    for method in judged:
        by_problem = {r["cell"]: r for r in _of(per_problem, method)}
        pooled = next((m for m in methods if m["method"] == method), None)
        rows = [(c, by_problem.get(c, {}).get("speed-up [95% CI]", "-"), i) for i, c in enumerate(names)]
        rows.append(("over the cells judged", pooled["speed-up [95% CI]"] if pooled else "-", None))
        top = y
        for label, text, colour in rows:
            found = _interval(text)
            if found is not None and found[0] > 0:
                point, low, high = (min(max(v, clip[0]), clip[1]) for v in found)
                look = (
                    {"color": "black", "marker": "D"}
                    if colour is None
                    else {"color": style(colour)["color"], "marker": "o"}
                )
                ax.plot([low, high], [y, y], color=look["color"], linewidth=2)
                ax.plot([point], [y], look["marker"], color=look["color"])
                marked.add(label)
            y -= 1
        ticks.append(((top + y + 1) / 2, method))
        y -= 0.8
    ax.axvline(1.0, color="grey", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(*clip)
    ax.set_yticks([t for t, _ in ticks], [m for _, m in ticks])
    ax.set_xlabel("speed-up over the tuned baseline (x, log scale; 95% interval, clipped to [1/64, 64])")
    ax.set_title("Above 1: grokked sooner than the tuned baseline")
    keys = [(name, style(i)["color"], "o") for i, name in enumerate(names)] + [("over the cells judged", "black", "D")]
    handles = [Line2D([], [], color=colour, marker=m, linestyle="none") for _, colour, m in keys]
    labels = [name if name in marked else f"{name} (no verdict)" for name, _, _ in keys]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(keys), 4), fontsize="small")
    return to_png(fig)
