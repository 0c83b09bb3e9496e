"""Which row of a problem's table is the baseline a row's speed-up is measured against.

The reference is the grokking papers' plain training: Adam or AdamW, no filter, plain sampling
(random, epoch or full batch), cross-entropy. A row's baseline is, among the problem's plain rows,
the one that agrees with the row on the most method settings; ties go to the faster baseline
(smaller time to target), then to more seeds, then to the label. A plain row is its own baseline.

index.md's definitions print the plain rows from the constants here, so the words follow the rule.
"""

from __future__ import annotations

from suite.leaderboard.collect import ABSENT

OPTIMIZERS = ("adam", "adamw")
SAMPLERS = ("random", "epoch", "full")
LOSS = "ce"  # a run without train.loss trained with cross-entropy


def is_plain(method: dict) -> bool:
    return (
        method["opt.name"] in OPTIMIZERS
        and method["filter.name"] == "none"
        and method["sampler.name"] in SAMPLERS
        and method.get("train.loss", LOSS) == LOSS
    )


def pick_baseline(row_method: dict, candidates: list[dict]) -> dict | None:
    """candidates: summary rows (with 'settings', 'time_to_target', 'seeds', 'method') of plain methods."""
    if not candidates:
        return None

    def rank(c):
        agree = sum(c["settings"].get(k, ABSENT) == v for k, v in row_method.items())
        return (-agree, c["time_to_target"], -c["seeds"], c["method"])

    return min(candidates, key=rank)
