"""Everything the leaderboard knows about particular studies lives in this package.

Here: which rows of a cell are plain baselines, the reference every speed-up is measured
against (the grokking papers' Adam / AdamW with plain sampling and cross-entropy). index.md
explains the rule in words (DEFINITIONS in suite/leaderboard/__init__.py): change both together.

Each module of the package registers the sections of one study (suite.leaderboard.sections)
and is imported before a leaderboard is made: grokking.py (the Adam-LR c sweep, the sampling
comparison), embedding_questions.py (Hessian, val by token frequency, weight decay x frequency),
number_probes.py (the probes' page). A new study is a new module here.
"""

BASELINE_OPTS = ("adam", "adamw")
BASELINE_SAMPLERS = ("random", "epoch", "full")
BASELINE_LOSS = "ce"  # a run without train.loss trained with cross-entropy
