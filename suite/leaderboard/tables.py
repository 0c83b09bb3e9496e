"""Text: how numbers, settings and commits are written, Markdown tables, CSV, file-name slugs.

Every format here is part of the byte-for-byte promise: changing one changes every committed table.
"""

from __future__ import annotations

import io
import json
import math
import re

import pandas as pd


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


def ratio_text(x: float) -> str:
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def interval_text(x: float, low: float, high: float) -> str:
    text = ratio_text(x)
    return text if math.isnan(low) else f"{text} [{ratio_text(low)}, {ratio_text(high)}]"


def p_text(p: float) -> str:
    return "-" if math.isnan(p) else f"{p:.2g}"


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
