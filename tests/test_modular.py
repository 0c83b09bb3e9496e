import pytest
import torch
from suite.tasks.modular import OPS, modular

from suite import SuiteError


def pairs(x):
    return {(int(a), int(b)) for a, _, b, _ in x.tolist()}


@pytest.mark.parametrize(
    "op, expected",
    [
        ("add", lambda a, b: (a + b) % 13),
        ("sub", lambda a, b: (a - b) % 13),
        ("mul", lambda a, b: a * b % 13),
        ("sqsum", lambda a, b: (a * a + b * b) % 13),
        ("div", lambda a, b: next(c for c in range(13) if c * b % 13 == a)),
    ],
)
def test_labels_and_token_layout(op, expected):
    data = modular(0, p=13, op=op)
    x = torch.cat([data.x_train, data.x_val])
    y = torch.cat([data.y_train, data.y_val])
    assert (x[:, 1] == 13).all() and (x[:, 3] == 14).all()  # op = p, '=' = p+1
    assert all(int(c) == expected(int(a), int(b)) for (a, _, b, _), c in zip(x.tolist(), y))
    assert data.vocab_size == 15 and data.n_classes == 13
    if op == "div":
        assert (x[:, 2] != 0).all()


def test_paper_split_sizes_and_disjointness():
    data = modular(0, p=97)
    total = 97 * 97
    assert len(data.y_val) == round(0.2 * total) and len(data.y_train) == round(0.3 * total)
    assert not pairs(data.x_train) & pairs(data.x_val)
    assert data.info == {"n_train": len(data.y_train), "n_val": len(data.y_val), "n_pairs": total}


def test_split_depends_on_seed_and_data_seed_pins_it():
    assert not torch.equal(modular(0, p=13).x_train, modular(1, p=13).x_train)
    assert torch.equal(modular(0, p=13, data_seed=5).x_train, modular(1, p=13, data_seed=5).x_train)


@pytest.mark.parametrize("op", ["add", "div"])
def test_uniform_split_spreads_every_operand_evenly_over_train_and_test(op):
    """The paper: "distribute all combinations of a and b evenly across training and test sets"."""
    data = modular(0, p=97, split="uniform", op=op)
    assert len(data.y_train) == round(0.3 * data.info["n_pairs"]) and len(data.y_val) == round(
        0.2 * data.info["n_pairs"]
    )
    assert not pairs(data.x_train) & pairs(data.x_val)
    for x in (data.x_train, data.x_val):
        for column in (0, 2):
            counts = torch.bincount(x[:, column], minlength=97)[1 if op == "div" and column == 2 else 0 :]
            assert counts.max() - counts.min() <= 1, counts
    random = modular(0, p=97)
    for x in (random.x_train, random.x_val):
        counts = torch.bincount(x[:, 0], minlength=97)
        assert counts.max() - counts.min() > 5  # what uniform fixes


def a_counts(x):
    return torch.bincount(x[:, 0], minlength=97)


def a_marginal(x):
    counts = a_counts(x).double()
    return counts / counts.sum()


def total_variation(data):
    return 0.5 * (a_marginal(data.x_train) - a_marginal(data.x_val)).abs().sum().item()


def test_skewed_split_biases_a_alike_in_train_and_test_and_its_strength_sets_how_much():
    """One draw of both sets with probability ~ (a + 1) ** -skew, dealt at random: the same skew in both."""
    mean_a = {}
    for skew in (0.0, 1.0, 3.0):
        data = modular(0, p=97, split="skewed", skew=skew)
        assert len(data.y_val) == round(0.2 * 97 * 97) and len(data.y_train) == round(0.3 * 97 * 97)
        assert not pairs(data.x_train) & pairs(data.x_val)
        train, val = a_counts(data.x_train), a_counts(data.x_val)
        mean_a[skew] = (data.x_train[:, 0].float().mean().item(), data.x_val[:, 0].float().mean().item())
        if skew > 0:
            assert train[:30].sum() > 2 * train[-30:].sum() and val[:30].sum() > 2 * val[-30:].sum()
    assert mean_a[0.0][0] == pytest.approx(48, abs=3) and mean_a[0.0][1] == pytest.approx(48, abs=3)  # no skew: none
    assert mean_a[3.0][0] < mean_a[1.0][0] < mean_a[0.0][0] and mean_a[3.0][1] < mean_a[1.0][1] < mean_a[0.0][1]
    # In distribution: train and test marginals of a are as close as a random split's (total variation
    # ~0.12), and every test operand a was trained on (the draw at skew 3 leaves no a out of both).
    for seed in range(3):
        skewed, random = modular(seed, p=97, split="skewed", skew=3.0), modular(seed, p=97, split="random")
        assert total_variation(skewed) <= 1.1 * total_variation(random)
        assert (a_counts(skewed.x_train)[skewed.x_val[:, 0]] > 0).all()


def test_the_holdout_skew_takes_the_small_a_into_the_test_set_and_the_train_skew_keeps_a_random_test_set():
    strong = modular(0, p=97, split="skewed_holdout", skew=3.0)
    assert total_variation(strong) > 0.5  # out of distribution
    assert (a_counts(strong.x_train)[strong.x_val[:, 0]] == 0).float().mean() > 0.2  # test a never trained on
    mild = modular(0, p=97, split="skewed_train", skew=1.0)
    assert a_counts(mild.x_train)[:10].sum() > 3 * a_counts(mild.x_train)[-10:].sum()
    assert torch.equal(mild.x_val, modular(0, p=97, split="random").x_val)


@pytest.mark.parametrize("split, held", [("rec", lambda a, b: a <= 4 and b <= 4), ("str", lambda a, b: a <= 4)])
def test_structured_splits_keep_the_block_out_of_training(split, held):
    data = modular(0, p=23, split=split, k=4)
    train, val = pairs(data.x_train), pairs(data.x_val)
    assert not any(held(a, b) for a, b in train)
    assert {(a, b) for a in range(23) for b in range(23) if held(a, b)} <= val
    assert len(train) + len(val) == 23 * 23 and not train & val


def test_token_frequencies_count_training_inputs():
    data = modular(0, p=13, split="skewed")
    expected = torch.bincount(data.x_train.flatten(), minlength=15)
    assert torch.equal(data.token_freq, expected)
    assert data.token_freq[13] == len(data.y_train)  # the operator is in every example


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"p": 15}, "prime"),
        ({"p": 2}, "prime in \\[3, 8191\\]"),
        ({"test_frac": 0.0}, r"test_frac must be in \(0, 1\)"),
        ({"train_frac": 1.5}, "train_frac"),
        ({"train_frac": 0.9, "test_frac": 0.2}, "<= 1"),
        ({"split": "rec", "k": 40, "p": 13}, "k must be"),
    ],
)
def test_bad_task_settings(kwargs, message):
    with pytest.raises(SuiteError, match=message):
        modular(0, **kwargs)


def test_ops_table_is_the_documented_set():
    assert set(OPS) == {"add", "sub", "mul", "div", "sqsum", "x2xyy2", "x3xy2y"}
