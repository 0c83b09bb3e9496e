"""Everything the leaderboard knows about particular studies lives in this package.

Each module of the package registers the sections of one study (suite.leaderboard.sections)
and is imported before a leaderboard is made: grokking.py (the Adam-LR c sweep, the sampling
comparison), embedding_questions.py (Hessian, val by token frequency, weight decay x frequency),
number_probes.py (the probes' page). A new study is a new module here.
"""
