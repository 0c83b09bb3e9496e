"""Text: how numbers, settings and commits are written, Markdown tables, CSV, file-name slugs.

Every format here is part of the byte-for-byte promise: changing one changes every committed table.
"""

from __future__ import annotations

import io
import json
import math
import re

import pandas as pd

from suite.leaderboard.speedup import ALPHA


def fmt_value(value) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, tuple):
        return ",".join(fmt_value(v) for v in value)
    return str(value)


def slug(text: str, taken: set) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("=", "-")).strip("_") or "all"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def steps_text(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf"
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def milestone_text(median: float, lo: float, hi: float, k: int, n: int) -> str:
    if k == 0:
        return "-"
    text = f"{steps_text(median)} [{steps_text(lo)}, {steps_text(hi)}]"
    return text + (f" ({k}/{n})" if k < n else "")


def accuracy_text(median: float, lo: float, hi: float) -> str:
    return "-" if math.isnan(median) else f"{median:.3f} [{lo:.3f}, {hi:.3f}]"


def ratio_text(x: float, unit: str = "", digits: int = 2) -> str:
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}{unit}"


def bound_text(x: float, unit: str = "") -> str:
    """An interval's bound, with the digits that show which side of 1 it lies on: the verdict
    follows from that side, and a lower bound of 1.003 printed as 1.00 reads as touching 1."""
    digits = 2
    while digits < 4 and math.isfinite(x) and x != 1 and round(x, digits) == 1:
        digits += 1
    return ratio_text(x, unit, digits)


def interval_text(x: float, low: float, high: float, unit: str = "") -> str:
    text = ratio_text(x, unit)
    return text if math.isnan(low) else f"{text} [{bound_text(low, unit)}, {bound_text(high, unit)}]"


def p_text(p: float) -> str:
    """Two significant digits, more where rounding would carry a p below ALPHA up to it (0.0496 is
    not printed as 0.05 beside a verdict that p < 0.05 made)."""
    if math.isnan(p):
        return "-"
    digits = 2
    while p < ALPHA <= float(f"{p:.{digits}g}"):
        digits += 1
    return f"{p:.{digits}g}"


def md_table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def commits_text(commits) -> str:
    counts = pd.Series([c[:12] if isinstance(c, str) else "unknown" for c in commits]).value_counts()
    pairs = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{c} ({n} run{'s' if n > 1 else ''})" for c, n in pairs)


def range_text(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def settings_text(settings: dict, kind: str) -> str:
    items = [(k.split(".", 1)[1], v) for k, v in settings.items() if k.startswith(kind + ".")]
    name = dict(items).pop("name")
    rest = " ".join(f"{k}={fmt_value(v)}" for k, v in items if k != "name")
    return f"`{name}` {rest}".strip()


def write_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format="%.6g", lineterminator="\n")
    return buf.getvalue()
