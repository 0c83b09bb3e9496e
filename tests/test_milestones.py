"""What a run reached: memorization, first touch, the held grok step, collapse (suite.engine.measures.Milestones)."""

import pytest

from suite.engine.milestones import Milestones
from suite.errors import SuiteError
from suite.specs.config import TrainConfig


def replay(vals, hold, target=0.99, every=100):
    return Milestones.of(
        [{"step": i * every, "train_acc": 1.0, "val_acc": v} for i, v in enumerate(vals)], 0.99, target, hold
    )


def test_a_touch_that_falls_back_before_the_hold_ends_is_not_a_grok():
    m = replay([0.1, 0.995, 0.99, 0.98, 0.995, 0.999, 1.0, 0.999], hold=300)
    assert (m.first_touch_step, m.grok_step, m.collapsed) == (100, 400, False)
    assert m.best_val_acc == 1.0 and m.delay == 400


def test_a_run_that_touches_and_collapses_never_groks_and_is_marked_collapsed():
    m = replay([0.1, 0.995, 0.992, 0.3, 0.01, 0.01], hold=300)
    assert (m.first_touch_step, m.grok_step, m.collapsed, m.best_val_acc) == (100, None, True, 0.995)


def test_a_run_that_holds_then_collapses_has_no_grok_step():
    m = replay([0.1, 0.995, 0.995, 0.995, 0.995, 0.2, 0.995], hold=300)
    assert (m.first_touch_step, m.grok_step, m.collapsed, m.delay) == (100, None, True, None)
    assert replay([0.1, 0.995, 0.995, 0.995, 0.995, 0.6], hold=300).grok_step == 100  # above half the target: lasts


def test_a_later_streak_that_holds_and_lasts_counts_after_a_collapse():
    m = replay([0.1, 0.995, 0.995, 0.995, 0.995, 0.2, 0.995, 0.995, 0.995, 0.995, 0.97], hold=300)
    assert (m.grok_step, m.collapsed) == (600, True)
    # the budget judges what the run had shown by then: held, not yet seen to collapse
    records = [{"step": i * 100, "train_acc": 1.0, "val_acc": v} for i, v in enumerate([0.1] + [0.995] * 4 + [0.2])]
    assert Milestones.of(records, 0.99, 0.99, 300, until=400).grok_step == 100


def test_the_earliest_grok_is_never_after_the_grok_a_run_then_makes():
    """The race stops a trial on these bounds: each must be at most the grok step the run ends with."""
    vals = [0.1, 0.995, 0.995, 0.2, 0.5, 0.995, 0.995, 0.995, 0.995, 0.999]
    final = replay(vals, hold=300).grok_step
    assert final == 500
    bounds = [replay(vals[: i + 1], hold=300).earliest_grok(i * 100) for i in range(len(vals))]
    assert bounds == [0, 100, 100, 300, 400, 500, 500, 500, 500, 500]  # last step, streak start, held grok
    assert all(b <= final for b in bounds)


def test_hold_zero_is_the_first_touch_and_the_budget_cuts_an_unfinished_hold():
    assert replay([0.1, 0.995, 0.9], hold=0).grok_step == 100
    assert replay([0.1, 0.995, 0.2], hold=0).grok_step is None  # a touch that collapses is no grok, even at hold 0
    records = [{"step": s, "train_acc": 1.0, "val_acc": 0.995 if s >= 100 else 0.1} for s in range(0, 1001, 100)]
    assert Milestones.of(records, 0.99, 0.99, 300, until=1000).grok_step == 100
    assert Milestones.of(records, 0.99, 0.99, 300, until=300).grok_step is None  # the hold ran past the budget


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"hold": -1}, "hold and patience must be >= 0"),
        ({"hold": 1000, "patience": 500}, "patience \\(500\\) is shorter than hold \\(1000\\)"),
    ],
)
def test_a_run_may_not_stop_before_its_hold_window_ends(settings, message):
    with pytest.raises(SuiteError, match=message):
        TrainConfig(**settings)
    TrainConfig(hold=1000, patience=None)  # never stopping early is fine
