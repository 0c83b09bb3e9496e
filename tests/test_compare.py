"""Speed-ups with an interval, exact permutation p-values, the verdict, Holm's adjustment and the pooled
verdict over problems, against hand-computed cases."""

import math

import pytest

from suite.leaderboard.speedup import (
    equivalence,
    holm,
    pooled,
    rank_test,
    ratio,
    speedup_interval,
    verdict,
)
from suite.leaderboard.tables import interval_text, p_text

INF = math.inf


def test_unpaired_p_is_the_rank_sum_over_every_relabelling():
    # 3 vs 3, the row faster on every seed: its ranks are 1, 2, 3, the most extreme of the
    # C(6, 3) = 20 relabellings on either side, so p = 2/20.
    assert rank_test([3, 4, 5], [1, 2, 2.5], paired=False)[0] == pytest.approx(0.1)
    # Ties and failures: pooled ranks 1, 2, 3 and three tied infinities at 5; the row's sum is 8
    # against a mean of 10.5; the subsets of size 3 with a sum <= 8 or >= 13: 8 of 20.
    assert rank_test([INF, INF, 5], [1, 2, INF], paired=False)[0] == pytest.approx(0.4)
    assert rank_test([1, 2, 3], [1, 2, 3], paired=False)[0] == 1.0


def test_paired_p_is_the_signed_rank_over_every_sign_flip():
    # 5 pairs, the row faster in each: all signs +, the most extreme of 2^5 sign patterns on either side.
    assert rank_test([3, 4, 5, 6, 7], [1, 2, 2.5, 3, 4], paired=True)[0] == pytest.approx(2 / 32)
    # log ratios ln 2, -ln 1.5, ln 3 ranked by size: 2, 1, 3; W+ = 5 against a mean of 3;
    # sign patterns with W+ <= 1 or >= 5 (sums of subsets of {1, 2, 3}): {}, {1}, {2,3}, {1,2,3} = 4 of 8.
    assert rank_test([200, 200, 300], [100, 300, 100], paired=True)[0] == pytest.approx(0.5)
    assert rank_test([INF, 5], [INF, 5], paired=True)[0] == 1.0  # both failed, or equal: ties only


def test_the_interval_brackets_the_speedup_and_resampling_is_fixed():
    base, row = [1000, 1200, 6900, 1100, 1300], [550, 600, 1000, 500, 650]
    low, high = speedup_interval(base, row, paired=True)
    assert low <= ratio(1200, 600) <= high and low > 1
    assert (low, high) == speedup_interval(base, row, paired=True)  # the same on every call and machine
    # the case: per-seed speed-ups 2.2, 11.5 and 1.0 on three seeds leave 1 inside
    low, high = speedup_interval([1320, 6900, 1000], [600, 600, 1000], paired=True)
    assert low <= 1 <= high


def test_failures_count_as_infinity_and_ties_of_failures_as_one():
    assert ratio(INF, INF) == 1 and ratio(500, INF) == 0 and math.isinf(ratio(INF, 500)) and ratio(300, 150) == 2
    low, high = speedup_interval([INF] * 5, [400, 500, 450, 600, 550], paired=True)
    assert math.isinf(low) and math.isinf(high)


def test_a_verdict_needs_the_interval_off_1_and_p_below_005_and_five_seeds():
    assert verdict(1.2, 3.0, 0.01, 5, 1) == "faster" and verdict(0.2, 0.9, 0.01, 10, -1) == "slower"
    assert verdict(0.8, 3.0, 0.01, 10, 1) == "not resolved (n = 10)"  # p alone does not carry it
    assert verdict(1.2, 3.0, 0.05, 10, 1) == "not resolved (n = 10)"  # nor the interval alone: p must be below 0.05
    assert verdict(0.2, 0.9, 0.0625, 10, -1) == "not resolved (n = 10)"
    assert verdict(INF, INF, 0.01, 3, 1) == "not resolved (n = 3)"  # 3 seeds never carry a claim
    # nor an interval and a p that point opposite ways: the test behind p must favour the same side
    assert verdict(1.2, 3.0, 0.01, 10, -1) == "not resolved (n = 10)"
    assert verdict(0.2, 0.9, 0.01, 10, 1) == verdict(1.2, 3.0, 0.01, 10, 0) == "not resolved (n = 10)"


def test_five_pairs_all_one_way_are_not_resolved():
    # The percentile interval of 5 pairs is [min, max] of the per-seed ratios: every seed faster puts it
    # above 1, but the signed-rank p of 5 pairs is at least 2/32, so the verdict was a 6.25% test.
    base, row = [1000, 1200, 6900, 1100, 1300], [550, 600, 1000, 500, 650]
    low, high = speedup_interval(base, row, paired=True)
    p, favours = rank_test(base, row, paired=True)
    assert low > 1 and p == pytest.approx(2 / 32)
    assert verdict(low, high, p, 5, favours) == "not resolved (n = 5)"


# 10 paired seeds: nine where the row is 2.0x-2.8x faster (log ratios ranked 1-9) and one more.
SLOW = [3000 + 100 * i for i in range(9)]
FASTER = [t / (2 + i / 10) for i, t in enumerate(SLOW)]


def test_ten_pairs_whose_interval_excludes_1_but_whose_p_does_not_reach_005_are_not_resolved():
    # the tenth seed 10x slower: the largest rank, W- = 10. Sign patterns with W+ <= 10 (or, mirrored,
    # >= 45): the subsets of {1..10} summing to 0..10 number 1+1+1+2+2+3+4+5+6+8+10 = 43, so p = 86/1024.
    # The medians barely feel that seed, so the interval lies above 1.
    base, row = [100, *SLOW], [1000, *FASTER]
    low, high = speedup_interval(base, row, paired=True)
    p, favours = rank_test(base, row, paired=True)
    assert low > 1 and p == pytest.approx(86 / 1024)
    assert verdict(low, high, p, 10, favours) == "not resolved (n = 10)"


def test_ten_pairs_whose_interval_and_p_agree_are_faster():
    # the tenth seed 1.1x slower: the smallest rank, W- = 1; W+ <= 1 by {} and {1}: p = 2 x 2/1024
    base, row = [1000, *SLOW], [1100, *FASTER]
    low, high = speedup_interval(base, row, paired=True)
    p, favours = rank_test(base, row, paired=True)
    assert low > 1 and p == pytest.approx(4 / 1024)
    assert verdict(low, high, p, 10, favours) == "faster"


def test_holm_multiplies_the_ith_smallest_by_m_minus_i_keeps_the_order_and_caps_at_1():
    # m = 3 (nan is no test): 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (monotone)
    assert holm([0.04, 0.01, math.nan, 0.03]) == pytest.approx([0.06, 0.03, math.nan, 0.06], nan_ok=True)
    assert holm([0.4, 0.7, 0.02]) == pytest.approx([0.8, 0.8, 0.06])  # 0.02 x 3, 0.4 x 2, max(0.8, 0.7)
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # 0.6 x 2 = 1.2, capped
    assert holm([0.003]) == [0.003] and holm([]) == []
    # an adjusted p takes back a verdict the raw one gave
    assert verdict(1.2, 2.0, 0.03, 10, 1) == "faster"
    assert verdict(1.2, 2.0, holm([0.03, 0.03])[0], 10, 1).startswith("not")


def test_pooled_is_the_geometric_mean_over_problems_with_a_sign_test_over_every_pair():
    # problem 1: every seed 2x faster (ratio of medians 400 / 200 = 2); problem 2: baseline 1,000 on four seeds,
    # the method 250 on three, 4,000 on one, and both failed on the fifth (a tie): ratio 1,000 / 250 = 4.
    problems = [
        ([400, 400, 500, 600, 400], [200, 200, 250, 300, 200]),
        ([1000, 1000, 1000, 1000, INF], [250, 250, 250, 4000, INF]),
    ]
    result = pooled(problems)
    assert result["speedup"] == pytest.approx(math.sqrt(2 * 4))
    assert (result["wins"], result["losses"], result["ties"], result["n_pairs"], result["n"]) == (8, 1, 1, 10, 5)
    # the sign test, ties dropped: 8 of 9, two-sided 2 x (1 + 9) / 2^9
    assert result["p"] == pytest.approx(20 / 512)
    # p < 0.05, but problem 2 resamples to a median of 4,000 or inf often enough (3+ of 5 draws from those
    # two seeds) that the interval reaches below 1: not resolved
    assert result["low"] < 1 < result["high"] and result["verdict"] == "not resolved (n = 5)"
    assert result == pooled(problems)  # the same on every call and machine
    # three problems every seed 2x-3x faster: 15 wins of 15, p = 2 / 2^15, interval above 1
    faster = pooled([([300] * 5, [100, 150, 150, 100, 150])] * 2 + [([600, 700, 800, 900, 1000], [300] * 5)])
    assert faster["p"] == pytest.approx(2 / 2**15) and faster["low"] > 1 and faster["verdict"] == "faster"


def test_pooled_cancels_a_problem_only_the_baseline_reached_against_one_only_the_method_reached():
    # ratios 100 / L and L / 400 (L: a failure's time) multiply to 1/4; with 8x in the third problem the
    # product is 2, the geometric mean 2^(1/3); not 0 x inf = nan
    result = pooled([([100] * 5, [INF] * 5), ([INF] * 5, [400] * 5), ([800] * 5, [100] * 5)])
    assert result["speedup"] == pytest.approx(2 ** (1 / 3))
    assert (result["wins"], result["losses"], result["ties"]) == (10, 5, 0)
    assert pooled([([100] * 5, [INF] * 5), ([800] * 5, [100] * 5)])["speedup"] == 0  # a leftover 1 / L
    with pytest.raises(ValueError, match="aligned by seed"):
        pooled([([1, 2, 3], [1, 2])])


def test_equivalence_needs_the_90_percent_interval_inside_the_declared_margin():
    base = [1000, 1050, 1100, 1150, 1200, 1250, 1300, 1350]
    # inside: every seed within 2% of its baseline
    low, high, said = equivalence(base, [t * 1.02 for t in base], paired=True)
    assert 1 / 1.1 <= low <= high <= 1.1 and said == "equivalent within 10%"
    # outside: 30% slower on every seed (the interval lies wholly below the margin)
    assert equivalence(base, [t * 1.3 for t in base], paired=True)[2] == "not shown equivalent (n = 8)"
    # straddling: the interval holds 1 and reaches past the margin: absence of evidence, not equivalence
    spread = [600, 1500, 900, 1700, 1000, 1400, 800, 1300]
    low, high, said = equivalence(base, spread, paired=True)
    assert low < 1 < high and (low < 1 / 1.1 or high > 1.1) and said.startswith("not shown equivalent")
    # a wider declared margin takes the same runs in; too few seeds never carry the claim
    assert equivalence(base, spread, paired=True, margin=1.0)[2] == "equivalent within 100%"
    assert equivalence(base[:4], [t * 1.02 for t in base[:4]], paired=True)[2] == "not shown equivalent (n = 4)"


def test_a_printed_bound_shows_which_side_of_1_it_lies_on():
    # The sampling board's grad_softmax row: a lower bound of 1.0026 and the verdict `faster`.
    # At two decimals it read "1.00", as if the interval touched 1.
    assert interval_text(1.1228, 1.0026, 1.2877) == "1.12 [1.003, 1.29]"
    assert interval_text(0.93, 0.83, 0.9996, "x") == "0.93x [0.83x, 0.9996x]"
    assert interval_text(1.0, 1.0, 1.0) == "1.00 [1.00, 1.00]"
    assert interval_text(2.8, 0.0, INF, "x") == "2.80x [0.00x, inf]"
    assert interval_text(math.nan, math.nan, math.nan) == "-"


def test_the_rank_test_says_which_way_it_points():
    # the row faster on every seed favours the row (1), the mirror the baseline (-1), ties neither (0)
    assert rank_test([3, 4, 5], [1, 2, 2.5], paired=False) == (pytest.approx(0.1), 1)
    assert rank_test([1, 2, 2.5], [3, 4, 5], paired=False) == (pytest.approx(0.1), -1)
    assert rank_test([3, 4, 5, 6, 7], [1, 2, 2.5, 3, 4], paired=True) == (pytest.approx(2 / 32), 1)
    assert rank_test([1, 2, 2.5, 3, 4], [3, 4, 5, 6, 7], paired=True) == (pytest.approx(2 / 32), -1)
    assert rank_test([INF, 5], [INF, 5], paired=True) == (1.0, 0)


def test_a_pooled_verdict_is_not_faster_when_most_seeds_were_slower():
    # one problem 10x faster on every seed, four 5% slower on every seed: the geometric mean of the ratios
    # of medians is 1.52x with every resample alike (interval above 1), the sign test 6 wins against 24
    # losses (p = 0.0014): significant, the other way. No word may stand beside both.
    base = [1000, 1100, 1200, 1300, 1400, 1500]
    result = pooled([(base, [t / 10 for t in base])] + [(base, [t * 1.05 for t in base])] * 4)
    assert result["low"] > 1 and result["p"] < 0.01 and (result["wins"], result["losses"]) == (6, 24)
    assert result["favours"] == -1 and result["verdict"] == "not resolved (n = 6)"


def test_two_rows_that_both_fail_are_not_shown_equivalent():
    # a resample where neither median reached the target is outside the margin, not a tie at 1
    assert equivalence([INF] * 5, [INF] * 5, paired=True)[2] == "not shown equivalent (n = 5)"
    # the only seeds that grokked differ 90-fold
    assert equivalence([INF] * 5 + [100], [INF] * 5 + [9000], paired=True)[2] == "not shown equivalent (n = 6)"
    # where both always reach it, the interval is the speed-up's, as before
    base = [1000, 1050, 1100, 1150, 1200]
    assert equivalence(base, [t * 1.02 for t in base], paired=True)[2] == "equivalent within 10%"


def test_a_p_below_005_never_prints_as_005():
    assert p_text(0.0496) == "0.0496" and p_text(0.04999) == "0.04999"
    assert p_text(0.05) == "0.05" and p_text(0.0625) == "0.062" and p_text(0.013) == "0.013"
    assert p_text(1.0) == "1" and p_text(math.nan) == "-"
