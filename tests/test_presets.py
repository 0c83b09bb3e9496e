"""Presets, and the fidelity of the 'grokfast' preset to Grokfast's public code."""

from __future__ import annotations

import pytest
import torch
from conftest import REPO, cli

from suite import SuiteError, build
from suite.specs.presets import apply
from suite.specs.registry import ALL
from suite.specs.spec import resolve


def _spec(choices=None, settings=None, preset="grokfast"):
    return resolve(
        *apply(
            preset,
            {"task": None, "model": None, "opt": None, "sampler": None, "filter": None, **(choices or {})},
            settings or {},
        )
    )


def test_grokfast_preset_follows_their_code():
    spec = _spec()
    assert {k: spec[k]["name"] for k in ("task", "model", "opt", "sampler", "filter")} == {
        "task": "modular",
        "model": "grokfast_transformer",
        "opt": "adam",
        "sampler": "epoch",
        "filter": "none",
    }
    task = spec["task"]
    assert (task["p"], task["op"], task["nonzero_b"], task["test_frac"], task["train_frac"]) == (
        97,
        "mul",
        True,
        0.5,
        0.5,
    )
    assert spec["opt"]["lr"] == 1e-3 and tuple(spec["opt"]["betas"]) == (0.9, 0.98) and spec["opt"]["weight_decay"] == 0
    assert spec["sampler"]["batch_size"] == 512
    assert (spec["train"]["warmup_steps"], spec["train"]["eval_every"], spec["train"]["target"]) == (10, 10, 0.95)


def test_the_filter_brings_its_weight_decay_and_explicit_settings_win():
    assert _spec({"filter": "grokfast_ema"})["opt"]["weight_decay"] == 0.005
    assert _spec({"filter": "grokfast_ma"})["opt"]["weight_decay"] == 0.01
    spec = _spec({"filter": "grokfast_ema"}, {"opt.weight_decay": "0.1", "train.steps": "100"})
    assert spec["opt"]["weight_decay"] == 0.1 and spec["train"]["steps"] == 100
    assert _spec(settings={"lr": "0.01"})["opt"]["lr"] == 0.01  # a bare key overrides too


def test_swapping_a_component_keeps_the_settings_it_takes():
    spec = _spec({"opt": "adamlr", "model": "mlp"})
    assert spec["opt"]["lr"] == 1e-3 and tuple(spec["opt"]["betas"]) == (0.9, 0.98)
    assert spec["model"]["d"] == 128 and "layers" not in spec["model"]


def test_the_egd_preset_is_their_sgd_setting_and_without_the_filter_its_baseline():
    egd, sgd = _spec(preset="egd"), _spec({"filter": "none"}, preset="egd")
    assert (egd["opt"]["name"], egd["filter"]["name"], sgd["filter"]["name"]) == ("sgd", "egd", "none")
    assert (egd["opt"]["lr"], egd["opt"]["momentum"], egd["opt"]["weight_decay"]) == (0.7, 0.0, 1e-4)
    assert (egd["task"]["p"], egd["task"]["train_frac"], egd["task"]["test_frac"]) == (127, 0.5, 0.5)
    assert (egd["model"]["inputs"], egd["model"]["hidden"], egd["sampler"]["batch_size"]) == ("onehot", 512, 512)
    assert {k: v for k, v in egd.items() if k != "filter"} == {k: v for k, v in sgd.items() if k != "filter"}


def test_unknown_preset_is_a_one_line_error():
    with pytest.raises(SuiteError, match="did you mean 'grokfast'"):
        apply("grokfst", {}, {})


def test_their_data_split_and_epochs():
    b = build(_spec())
    data = b.data
    assert (len(data.y_train), len(data.y_val)) == (4656, 4656)  # y in 1..96: 9,312 pairs, half each
    xs = torch.cat([data.x_train, data.x_val])
    assert xs[:, 2].min() == 1 and xs[:, 2].max() == 96
    assert torch.equal(torch.cat([data.y_train, data.y_val]), (xs[:, 0] * xs[:, 2]) % 97)
    batches = [b.sampler.next() for _ in range(20)]
    assert [len(x) for x in batches[:10]] == [512] * 9 + [48]  # 10 steps an epoch, a short last batch
    for epoch in (batches[:10], batches[10:]):
        assert torch.equal(torch.cat(epoch).sort().values, torch.arange(4656))
    assert not torch.equal(torch.cat(batches[:10]), torch.cat(batches[10:]))  # reshuffled


def test_their_model_scores_the_whole_vocabulary():
    b = build(_spec())
    model = b.model
    assert model(b.data.x_train[:5]).shape == (5, 99)
    assert model.head.bias is None
    assert model.embedding_weight.shape == (99, 128) and model.coupled_weight.shape == (384, 128)
    assert sum(p.numel() for p in model.parameters()) == 422_784
    assert isinstance(model.layers[0].mlp[1], torch.nn.GELU)


def test_cli_lists_presets_and_filters():
    listed = cli("list")
    out = listed.stdout
    assert listed.returncode == 0, listed.stderr
    assert "grokfast" in out and "with --filter grokfast_ema: opt.weight_decay=0.005" in out
    for name in ALL["filter"].names():
        if not ALL["filter"].get(name).origin.startswith(str(REPO / "tests")):  # a test's own, in this process only
            assert name in out
    assert "alpha=0.98" in out and "window=100" in out
    bad = cli("run", "--preset", "nope")
    assert bad.returncode == 2 and "unknown preset 'nope'" in bad.stderr
