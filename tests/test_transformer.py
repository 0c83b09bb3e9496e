"""The Nanda-style transformer: shapes, causal attention, last-position readout, parameter
groups, and every optimizer x sampler through the one training loop."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import PreemptAt, as_cells, metrics_text
from suite.models.transformer import Transformer
from suite.tasks.modular import modular

from suite import SuiteError
from suite.engine.train import Preempted, train
from suite.specs.contracts import ParamGroups
from suite.specs.registry import ALL
from suite.specs.spec import resolve

SMALL = {"d_model": 16, "n_heads": 4, "d_mlp": 32}
TINY_RUN = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "train.steps": 12, "eval_every": 4, **SMALL}


@pytest.fixture(scope="module")
def data():
    return modular(0, p=11, train_frac=0.5, test_frac=0.3)


def test_shapes_and_defaults(data):
    torch.manual_seed(0)
    model = Transformer(data)  # Nanda's sizes: d_model 128, 4 heads, MLP 512, one layer, no LayerNorm
    assert model.embedding_weight.shape == (13, 128)  # p + op + '='
    assert model.positions.shape == (4, 128)
    assert len(model.blocks) == 1 and model.blocks[0].mlp_in.shape == (512, 128)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    assert model(data.x_val).shape == (len(data.x_val), 11)
    assert model.residual(data.x_val[:5]).shape == (5, 4, 128)
    two = Transformer(data, n_layers=2, layer_norm=True, **SMALL)
    assert len(two.blocks) == 2 and sum(isinstance(m, torch.nn.LayerNorm) for m in two.modules()) == 5
    assert two(data.x_val).shape == (len(data.x_val), 11)


def test_bad_sizes_are_refused(data):
    with pytest.raises(SuiteError, match="multiple of n_heads"):
        Transformer(data, d_model=30, n_heads=4)
    with pytest.raises(SuiteError, match="positive"):
        Transformer(data, n_layers=0)


def test_attention_is_causal_softmax_attention(data):
    """Each head is softmax(q k^T / sqrt(d_head)) v under a causal mask (torch's reference)."""
    torch.manual_seed(0)
    block = Transformer(data, **SMALL).blocks[0]
    x = torch.randn(3, 4, 16)
    q, k, v = (t.reshape(3, 4, 4, 4).transpose(1, 2) for t in F.linear(x, block.qkv).chunk(3, dim=-1))
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = F.linear(heads.transpose(1, 2).reshape(3, 4, 16), block.out)
    torch.testing.assert_close(block.attention(x), expected)


def test_readout_is_the_last_position_and_earlier_positions_ignore_later_tokens(data):
    torch.manual_seed(0)
    model = Transformer(data, n_layers=2, **SMALL)
    x = data.x_val[:8]
    torch.testing.assert_close(model(x), model.residual(x)[:, -1] @ model.unembed.T)
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 13  # only the last token differs
    before, after = model.residual(x), model.residual(changed)
    torch.testing.assert_close(before[:, :-1], after[:, :-1])  # causal: positions 0..2 cannot see it
    assert not torch.allclose(before[:, -1], after[:, -1])
    earlier = x.clone()
    earlier[:, 0] = (earlier[:, 0] + 1) % 11  # the first operand reaches the readout through attention
    assert not torch.allclose(model(x), model(earlier))


def test_embedding_parameter_groups(data):
    model = Transformer(data, n_layers=2, **SMALL)
    groups = ParamGroups.of(model)
    assert groups.embedding == [model.embed] and groups.coupled is model.blocks[0].qkv
    assert groups.coupled.shape == (3 * 16, 16)  # the stacked query/key/value projection reads E first
    assert all(p is not model.embed for p in groups.rest)
    assert {id(p) for p in groups.all} == {id(p) for p in model.parameters()}
    opt = ALL["opt"].get("adamlr").build(groups, lr=1e-3, c=8.0)
    assert opt.param_groups[0]["params"] == [model.embed] and opt.param_groups[0]["lr"] == pytest.approx(8e-3)
    assert opt.param_groups[1]["lr"] == pytest.approx(1e-3)


def test_nanda_initialisation_scales(data):
    torch.manual_seed(0)
    model = Transformer(data)
    for weight in (model.embed, model.blocks[0].qkv, model.blocks[0].mlp_in, model.blocks[0].mlp_out):
        assert weight.std().item() == pytest.approx(1 / math.sqrt(128), rel=0.1)
    assert model.unembed.std().item() == pytest.approx(1 / math.sqrt(13), rel=0.1)  # 1/sqrt(d_vocab)
    assert model.blocks[0].mlp_in_bias.abs().sum() == 0


OPTIMIZERS = ["adam", "adamw", "sgd", "adamlr", "adamlr_adaptive"]
SAMPLERS = ["random", "full", "frequency", "epoch"]


@pytest.mark.parametrize("opt", OPTIMIZERS)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_optimizer_and_sampler_trains_the_transformer(tmp_path, opt, sampler):
    settings = dict(TINY_RUN, **({} if sampler == "full" else {"batch_size": 16}))
    if opt == "adamlr_adaptive":
        settings["every"] = 3
    (result,) = train(
        as_cells([resolve({"model": "transformer", "opt": opt, "sampler": sampler}, settings)], [tmp_path]),
        torch.device("cpu"),
    )
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert result["steps"] == 12 and [r["step"] for r in records] == [0, 4, 8, 12]
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["sigma_ratio"]) for r in records)
    assert records[-1]["train_loss"] < records[0]["train_loss"]  # it learns something in 12 steps
    assert {"emb_norm_rare", "emb_norm_frequent", "med"} <= set(records[0])


def test_nanda_setting_is_the_transformer_s_own_and_recorded_in_the_spec():
    spec = resolve({"model": "transformer", "opt": "adamw", "sampler": "full"})
    assert spec["opt"] == {"name": "adamw", "lr": 1e-3, "weight_decay": 1.0, "betas": (0.9, 0.98), "eps": 1e-8}
    assert spec["train"]["warmup_steps"] == 10 and spec["sampler"] == {"name": "full"}
    assert spec["model"] == {
        "name": "transformer",
        "n_layers": 1,
        "d_model": 128,
        "n_heads": 4,
        "d_mlp": 512,
        "layer_norm": False,
    }


def test_adam_lr_on_the_transformer_is_the_decoupled_one_at_nanda_s_recipe_and_set_wins():
    """The model's declared defaults (opt_defaults): `--model transformer --opt adamlr` is the late-grokking
    cell of leaderboards/adamlr_transformer_adamw (adamwlr, c = 10, batch 512, 10 warmup steps), the
    embedding paper's Adam at lr 1e-2 (which collapsed there) only when asked for; the MLP keeps the paper's."""
    spec = resolve({"model": "transformer", "opt": "adamlr"})
    board = resolve({"model": "transformer", "opt": "adamwlr"}, {"c": 10, "batch_size": 512, "train.steps": 20000})
    assert spec["opt"] == board["opt"] | {"name": "adamlr", "decoupled_weight_decay": True}
    assert {k: v for k, v in spec.items() if k != "opt"} == {k: v for k, v in board.items() if k != "opt"}
    assert resolve({"model": "transformer", "opt": "adam"})["opt"]["decoupled_weight_decay"] is True
    paper = {"lr": 1e-2, "weight_decay": 1e-3, "betas": "0.9,0.999", "decoupled_weight_decay": False}
    asked = resolve({"model": "transformer", "opt": "adamlr"}, paper | {"train.warmup_steps": 0})
    assert asked["opt"] | {"betas": "0.9,0.999"} == spec["opt"] | paper and asked["opt"]["betas"] == (0.9, 0.999)
    assert asked["train"]["warmup_steps"] == 0
    mlp = resolve({"opt": "adamlr"})
    assert (mlp["opt"]["lr"], mlp["opt"]["weight_decay"], mlp["opt"]["decoupled_weight_decay"]) == (1e-2, 1e-3, False)
    assert mlp["opt"]["betas"] == (0.9, 0.999) and mlp["train"]["warmup_steps"] == 0
    assert resolve({"model": "transformer", "opt": "sgd"})["opt"]["lr"] == 0.1  # no recipe declared for it


def test_interrupted_transformer_run_resumes_to_the_same_numbers(tmp_path):
    spec = resolve(
        {"model": "transformer", "opt": "adamlr_adaptive", "sampler": "frequency"},
        dict(
            TINY_RUN,
            **{
                "train.steps": 30,
                "checkpoint_every": 10,
                "batch_size": 16,
                "every": 4,
                "n_layers": 2,
                "warmup_steps": 10,
            },
        ),
    )
    cpu = torch.device("cpu")
    train(as_cells([spec], [tmp_path / "whole"]), cpu)[0]
    with pytest.raises(Preempted):
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(16)]), cpu)
    train(as_cells([spec], [tmp_path / "cut"]), cpu)[0]
    assert metrics_text(tmp_path / "cut") == metrics_text(tmp_path / "whole")
