"""Optimizers, samplers and the MLP: the pieces the loop wires together."""

import copy
import io
import json
import math

import pytest
import torch
import torch.nn.functional as F
from suite.tasks.modular import modular

from suite import SuiteError, build
from suite.components.optimizers import orthogonalize
from suite.specs.contracts import ParamGroups
from suite.specs.registry import ALL
from suite.specs.spec import resolve, spec_id, with_later_defaults

CPU = torch.device("cpu")


def built(**settings):
    choices = {k: settings.pop(k) for k in ("opt", "sampler", "model") if k in settings}
    return build(resolve(choices, {"batch_size": 16, **settings}))  # p = 13 trains on 51 pairs


def test_mlp_shapes_and_named_weights():
    b = built(p=13)
    assert b.model(b.data.x_train[:5]).shape == (5, 13)
    assert b.model.embedding_weight.shape == (15, 128)
    assert b.model.coupled_weight.shape == (512, 4 * 128)  # W reads the 4 concatenated embeddings
    one_hot = built(p=13, inputs="onehot").model
    assert one_hot.embedding_weight is None and one_hot.coupled_weight is None
    assert one_hot.hidden.weight.shape == (512, 4 * 15)


def test_scalar_inputs_are_the_four_token_values_scaled_to_one():
    """The paper's MLP without embeddings (Sec. 3.3): x = (a, P, b, P+1) / (P+1) into W1 -> ReLU -> W2."""
    b = built(p=13, inputs="scalar")
    model = b.model
    assert model.embedding_weight is None and model.hidden.weight.shape == (512, 4)
    x = torch.tensor([[3, 13, 7, 14], [0, 13, 12, 14]])
    first = x.float() / 14
    assert torch.allclose(first[0], torch.tensor([3 / 14, 13 / 14, 7 / 14, 1.0]))
    expected = model.out(torch.relu(first @ model.hidden.weight.T + model.hidden.bias))
    assert torch.allclose(model(x), expected)
    # a and b are read by position: swapping them is another input.
    assert not torch.equal(model(x[:, [2, 1, 0, 3]]), model(x))
    assert resolve({"model": "mlp"}, {"inputs": "scalar"})["model"]["inputs"] == "scalar"  # the spec records the mode
    raw = built(p=13, inputs="scalar_raw").model  # the same numbers unscaled: the paper does not say which
    assert torch.allclose(raw(x), raw.out(torch.relu(x.float() @ raw.hidden.weight.T + raw.hidden.bias)))


def test_param_groups_split_embedding_from_rest():
    model = built(p=13).model
    groups = ParamGroups.of(model)
    assert groups.embedding == [model.embedding_weight]
    assert len(groups.all) == len(list(model.parameters()))
    assert all(p is not model.embedding_weight for p in groups.rest)


def test_adamlr_runs_the_embedding_at_c_times_lr():
    opt = built(p=13, opt="adamlr", c=4, lr=1e-3).optimizer
    emb, rest = opt.param_groups
    assert emb["lr"] == pytest.approx(4e-3) and rest["lr"] == pytest.approx(1e-3)
    assert opt.defaults["weight_decay"] == 1e-3


def _steps(model, optimizer, x, y, n=5):
    for _ in range(n):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def test_decoupled_adamlr_is_adamw_at_c_1_and_runs_the_embeddings_whole_step_at_c_times():
    """adamwlr (issue 15): AdamW whose embedding group has lr c * lr, decay included."""
    same = [built(p=13, opt=opt, **extra) for opt, extra in (("adamw", {}), ("adamwlr", {"c": 1}))]
    for b in same:
        _steps(b.model, b.optimizer, b.data.x_train, b.data.y_train)
    assert all(torch.equal(p, q) for p, q in zip(same[0].model.parameters(), same[1].model.parameters()))
    b = built(p=13, opt="adamwlr", c=3, lr=1e-3, weight_decay=0.5)
    emb, rest = b.optimizer.param_groups
    assert emb["params"] == [b.model.embedding_weight] and emb["lr"] == pytest.approx(3e-3) and rest["lr"] == 1e-3
    # With no gradient, a step is the decay alone: E shrinks by c * lr * wd, the rest by lr * wd.
    E, W = b.model.embedding_weight, b.model.coupled_weight
    E0, W0 = E.detach().clone(), W.detach().clone()
    for p in b.model.parameters():
        p.grad = torch.zeros_like(p)
    b.optimizer.step()
    assert torch.allclose(E, E0 * (1 - 3e-3 * 0.5)) and torch.allclose(W, W0 * (1 - 1e-3 * 0.5))


def test_adam_and_adamlr_with_decoupled_weight_decay_are_adamw_and_adamwlr_step_for_step():
    """The transformer's recipe runs them so (models/transformer.py); a spec that leaves the setting at
    coupled keeps the id it had before the setting existed (spec.LATER_DEFAULTS)."""
    nanda = {"lr": 1e-3, "weight_decay": 1.0, "betas": (0.9, 0.98), "decoupled_weight_decay": True}
    for mine, theirs in (("adam", "adamw"), ("adamlr", "adamwlr")):
        pair = [built(p=13, model="mlp", opt=mine, **nanda), built(p=13, model="mlp", opt=theirs)]
        for b in pair:
            _steps(b.model, b.optimizer, b.data.x_train, b.data.y_train)
        assert all(torch.equal(p, q) for p, q in zip(pair[0].model.parameters(), pair[1].model.parameters()))
    coupled = [built(p=13, opt=opt, lr=1e-3, weight_decay=1.0) for opt in ("adam", "adamw")]
    for b in coupled:
        _steps(b.model, b.optimizer, b.data.x_train, b.data.y_train)
    assert not torch.equal(coupled[0].model.embedding_weight, coupled[1].model.embedding_weight)
    spec = resolve({"opt": "adamlr"})
    older = {**spec, "opt": {k: v for k, v in spec["opt"].items() if k != "decoupled_weight_decay"}}
    assert spec["opt"]["decoupled_weight_decay"] is False and spec_id(spec) == spec_id(older)
    assert spec_id(resolve({"opt": "adamlr"}, {"decoupled_weight_decay": True})) != spec_id(spec)


def test_a_run_of_adamw_reads_as_adamw_and_reruns(tmp_path):
    """AdamW is decoupled by its definition and takes no decoupled_weight_decay: a spec of it stored before
    that setting existed gains none when read (it was labelled "coupled" on the boards, and `run --like`
    refused it), while an older Adam spec reads as the coupled Adam it ran."""
    from suite.commands.run import like

    for opt in ("adamw", "adamwlr"):
        spec = resolve({"model": "transformer", "opt": opt})
        assert "decoupled_weight_decay" not in with_later_defaults(spec)["opt"]
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        choices, settings, seed = like(str(tmp_path), {}, {})
        assert resolve(choices, settings, seed) == spec
    adam = resolve({"opt": "adam"})
    older = {**adam, "opt": {k: v for k, v in adam["opt"].items() if k != "decoupled_weight_decay"}}
    assert with_later_defaults(older) == adam


MUON = {"muon_lr": 2e-2, "lr": 1e-3, "weight_decay": 0.1, "momentum": 0.95, "betas": (0.9, 0.98), "eps": 1e-8}


def _muon(decoupled: bool, **settings):
    return built(p=13, opt="muon", d=16, hidden=32, decoupled_weight_decay=decoupled, **settings)


def _scale(W) -> float:
    return math.sqrt(max(1, W.shape[0] / W.shape[1]))


def test_muon_decays_decoupled_by_default_as_it_did_before_the_setting_step_for_step():
    """The reference: Muon's step as it was written before decoupled_weight_decay existed, on the
    hidden matrix, and torch's AdamW on the rest."""
    b = _muon(True)
    reference = copy.deepcopy(b.model)
    W = reference.hidden.weight
    adamw = torch.optim.AdamW(
        [p for p in reference.parameters() if p is not W],
        lr=MUON["lr"],
        weight_decay=MUON["weight_decay"],
        betas=MUON["betas"],
        eps=MUON["eps"],
    )
    lr, decay, momentum, buf = MUON["muon_lr"], MUON["weight_decay"], MUON["momentum"], torch.zeros_like(W)
    for _ in range(3):
        for model in (b.model, reference):
            model.zero_grad()
            F.cross_entropy(model(b.data.x_train), b.data.y_train).backward()
        b.optimizer.step()
        with torch.no_grad():
            buf.lerp_(W.grad, 1 - momentum)
            update = orthogonalize(W.grad.lerp(buf, momentum), torch.float32)
            W.mul_(1 - lr * decay)
            W.add_(update, alpha=-lr * _scale(W))
        adamw.step()
    assert all(torch.equal(p, q) for p, q in zip(b.model.parameters(), reference.parameters()))


def test_muon_with_coupled_weight_decay_adds_it_to_every_gradient_first_and_shrinks_nothing():
    decay = 0.5
    b = _muon(False, weight_decay=decay)
    W, bias = b.model.hidden.weight, b.model.hidden.bias
    W0, bias0 = W.detach().clone(), bias.detach().clone()
    b.model.zero_grad()
    F.cross_entropy(b.model(b.data.x_train), b.data.y_train).backward()
    g_W, g_bias = W.grad + decay * W0, bias.grad + decay * bias0
    b.optimizer.step()
    # Muon's first step: the momentum buffer (1 - m) g from zero, Nesterov's g.lerp(buffer, m), orthogonalized
    m = MUON["momentum"]
    nesterov = g_W.lerp((1 - m) * g_W, m)
    expected = W0 - MUON["muon_lr"] * _scale(W0) * orthogonalize(nesterov, torch.float32)
    assert torch.allclose(W, expected, rtol=0, atol=1e-6)
    # Adam's first step, bias-corrected: m_hat = g, v_hat = g^2 (to float32 rounding of the bias, ~1e-8; lr is 1e-3)
    assert torch.allclose(bias, bias0 - MUON["lr"] * g_bias / (g_bias.abs() + MUON["eps"]), rtol=0, atol=3e-8)
    decoupled = _muon(True, weight_decay=decay)
    _steps(decoupled.model, decoupled.optimizer, decoupled.data.x_train, decoupled.data.y_train, n=1)
    assert not torch.allclose(decoupled.model.hidden.weight, W, rtol=0, atol=1e-6)


def test_muon_state_round_trips_through_a_checkpoint_and_one_from_before_the_setting_reads_as_decoupled():
    for decoupled in (True, False):
        a, b = _muon(decoupled), _muon(decoupled)
        x, y = a.data.x_train, a.data.y_train
        _steps(a.model, a.optimizer, x, y, n=2)
        saved = io.BytesIO()
        torch.save(a.optimizer.state_dict(), saved)
        b.model.load_state_dict(a.model.state_dict())
        b.optimizer.load_state_dict(torch.load(io.BytesIO(saved.getvalue())))
        for run in (a, b):
            _steps(run.model, run.optimizer, x, y, n=2)
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
        assert b.optimizer.parts[0].param_groups[0]["decoupled_weight_decay"] is decoupled
    older = copy.deepcopy(a.optimizer.state_dict())
    del older["muon"]["param_groups"][0]["decoupled_weight_decay"]
    fresh = _muon(False).optimizer
    fresh.load_state_dict(older)
    assert fresh.parts[0].param_groups[0]["decoupled_weight_decay"] is True


def test_a_muon_spec_at_decoupled_decay_keeps_the_id_it_had_before_the_setting():
    """Muon always decayed decoupled: its stored runs keep their ids, a coupled run gets its own."""
    spec = resolve({"opt": "muon"})
    older = {**spec, "opt": {k: v for k, v in spec["opt"].items() if k != "decoupled_weight_decay"}}
    assert spec["opt"]["decoupled_weight_decay"] is True and spec_id(spec) == spec_id(older)
    assert with_later_defaults(older) == spec
    assert spec_id(resolve({"opt": "muon"}, {"decoupled_weight_decay": False})) != spec_id(spec)


def test_embed_init_scales_the_same_initial_draw_and_only_applies_to_embeddings():
    default, small = built(p=13).model, built(p=13, embed_init=0.1).model  # each seeded by its spec
    assert torch.equal(small.embedding_weight, default.embedding_weight * 0.1)
    assert torch.equal(small.hidden.weight, default.hidden.weight)
    assert resolve({}, {"embed_init": 0.1})["model"]["embed_init"] == 0.1  # the spec records it
    for bad in ({"embed_init": 0}, {"embed_init": 0.5, "inputs": "onehot"}):
        with pytest.raises(SuiteError, match="embed_init"):
            built(p=13, **bad)


@pytest.mark.parametrize("opt", ["adamlr", "adamlr_adaptive", "adamwlr"])
def test_embedding_optimizers_refuse_models_without_embeddings(opt):
    with pytest.raises(SuiteError, match="no token embedding"):
        built(p=13, inputs="onehot", opt=opt)


def test_adaptive_c_follows_the_proposition():
    b = built(p=13, opt="adamlr_adaptive", every=3, batch_size=8, c_max=1e6, c_min=0.0)
    model, opt, data = b.model, b.optimizer, b.data
    hits = []
    for _ in range(3):
        idx = b.sampler.next()
        opt.zero_grad()
        F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
        hits.append((model.embedding_weight.grad.abs().sum(1) > 0).float().mean().item())
        E, W = model.embedding_weight.detach().clone(), model.coupled_weight.detach().clone()
        opt.step()
    sigma = lambda m: torch.linalg.matrix_norm(m, ord=2).item()  # noqa: E731
    # c is computed from E and W as they stand before the third update, f_E from the rows hit
    expected = sigma(E) / sigma(W) / (sum(hits) / 3)
    assert opt.param_groups[0]["c"] == pytest.approx(expected, rel=1e-5)
    assert opt.param_groups[0]["lr"] == pytest.approx(expected * opt.param_groups[1]["lr"], rel=1e-5)
    assert sum(hits) / 3 < 1  # a batch of 8 leaves some rows without gradient


def test_sigma_max_runs_numpy_on_one_blas_thread_and_gives_the_rest_back(monkeypatch):
    # OpenBLAS workers spin after a call and slowed the training steps after every evaluation.
    from suite.engine import measures

    blas_threads = lambda: [lib["num_threads"] for lib in measures.BLAS.info() if lib["user_api"] == "blas"]  # noqa: E731
    inside, real = [], measures._sigma_max
    monkeypatch.setattr(measures, "_sigma_max", lambda *a: inside.append(blas_threads()) or real(*a))
    with measures.BLAS.limit(limits=2, user_api="blas"):  # as a lone run on 2 cores has it
        assert measures.sigma_max(torch.randn(200, 300)) > 0
        assert inside == [[1]] and blas_threads() == [2]


def test_sigma_max_is_the_spectral_norm_at_any_scale_and_a_zero_w_gives_no_ratio():
    from types import SimpleNamespace

    from suite.engine.measures import progress_measures, sigma_max

    g = torch.Generator().manual_seed(0)
    for shape in ((512, 512), (384, 160), (99, 128), (4, 3)):
        for scale in (1.0, 1e-25, 1e20):  # weight decay can leave W tiny: its square must not underflow
            w = torch.randn(*shape, generator=g) * scale
            assert sigma_max(w) == pytest.approx(torch.linalg.matrix_norm(w.double(), ord=2).item(), rel=1e-9)
    alternating = torch.ones(300)
    alternating[1::2] = -1  # a top singular vector orthogonal to an all-ones start: Lanczos still finds it
    for w in (
        torch.linalg.qr(torch.randn(300, 300, generator=g, dtype=torch.float64))[0],  # all singular values 1
        torch.outer(torch.randn(200, generator=g), alternating).double(),
    ):
        assert sigma_max(w) == pytest.approx(torch.linalg.matrix_norm(w, ord=2).item(), rel=1e-9)
    assert sigma_max(torch.zeros(4, 3)) == 0.0 and sigma_max(torch.zeros(300, 200)) == 0.0
    assert math.isnan(sigma_max(torch.tensor([[float("inf"), 1.0]])))  # a diverged run's W
    data = built(p=13).data
    E = torch.randn(data.vocab_size, 8, generator=g)
    measures = progress_measures(SimpleNamespace(embedding_weight=E, coupled_weight=torch.zeros(16, 32)), data)
    assert math.isnan(measures["sigma_ratio"]) and measures["emb_norm_rare"] > 0


def test_random_sampler_draws_distinct_examples_reproducibly():
    data = modular(0, p=13)

    def draw(seed):
        return ALL["sampler"].get("random").build(data, torch.Generator().manual_seed(seed), batch_size=16).next()

    batch = draw(0)
    assert len(batch) == 16 and len(set(batch.tolist())) == 16 and batch.max() < len(data.y_train)
    assert torch.equal(batch, draw(0)) and not torch.equal(batch, draw(1))


def test_full_sampler_gives_everything():
    data = modular(0, p=13)
    assert torch.equal(
        ALL["sampler"].get("full").build(data, torch.Generator()).next(), torch.arange(len(data.y_train))
    )


def test_frequency_sampler_evens_out_token_updates():
    """On a skewed split, every number token should get gradients at the same rate."""
    data = modular(0, p=31, split="skewed_train", skew=1.5)  # every token trained on, some rarely

    def spread(name, **kw):  # coefficient of variation of how often each number token is drawn
        sampler = ALL["sampler"].get(name).build(data, torch.Generator().manual_seed(0), batch_size=64, **kw)
        counts = sum(torch.bincount(data.x_train[sampler.next()].flatten(), minlength=33)[:31] for _ in range(300))
        return (counts.float().std() / counts.float().mean()).item()

    assert spread("random") > 0.3  # skewed: large operands are rare
    assert spread("frequency") < 0.1
    assert spread("frequency", power=0.0) == pytest.approx(spread("random"), rel=0.3)


def test_frequency_sampler_needs_token_frequencies():
    data = modular(0, p=13)
    data.token_freq = None
    with pytest.raises(SuiteError, match="token frequencies"):
        ALL["sampler"].get("frequency").build(data, torch.Generator())


def test_grad_softmax_sampler_follows_softmax_of_squared_gradient_norms():
    """Appendix A, eq. 19: p_i = softmax(L_i^2 / gamma), gamma in units of the mean L_i^2; tokens
    are drawn with probability ~ p_i."""
    data = modular(0, p=5, split="random", train_frac=0.6, test_frac=0.2)  # 15 pairs of tokens 0..4, op 5, '=' 6
    sampler = (
        ALL["sampler"]
        .get("grad_softmax")
        .build(data, torch.Generator().manual_seed(0), batch_size=4, gamma=0.5, beta=0.9)
    )
    p0 = sampler.token_probabilities()
    assert torch.allclose(p0[:5], torch.full((5,), 0.2)) and p0[5:].eq(0).all()  # before any step: equal
    batch = sampler.next()
    count = torch.bincount(data.x_train[batch].flatten(), minlength=7).float()
    grad = torch.zeros(7, 3)
    grad[:, 0] = torch.arange(1.0, 8.0)  # row norms 1..7
    sampler.observe(grad)
    first = torch.arange(1.0, 8.0) * 4 / count.clamp(min=1)  # per example: norm * batch / occurrences
    present = count[:5] > 0
    assert torch.allclose(sampler.L[:5][present], first[:5][present]) and sampler.L[:5][~present].eq(0).all()
    sampler.batch = batch
    sampler.observe(2 * grad)  # a running mean from then on: 0.9 * old + 0.1 * new
    assert torch.allclose(sampler.L[:5][present], first[:5][present] * 1.1)

    sampler.L, sampler.seen = (
        torch.tensor([1.0, 2.0, 3.0, 0.0, 1.0, 9.0, 9.0]),
        torch.tensor([1, 1, 1, 0, 1, 1, 1]).bool(),
    )
    L = torch.tensor([1.0, 2.0, 3.0, 1.75, 1.0])  # the unseen token takes the seen ones' mean
    expected = torch.softmax(L.square() / (0.5 * L.square().mean()), 0)
    p = sampler.token_probabilities()
    assert torch.allclose(p[:5], expected) and p[5:].eq(0).all()
    # drawn token frequencies follow p: on all 25 pairs every token is independent of the other
    full = modular(0, p=5, train_frac=0.8, test_frac=0.2)
    full.x_train = torch.cartesian_prod(torch.arange(5), torch.arange(5))[:, [0, 0, 1, 1]]
    full.x_train[:, 1], full.x_train[:, 3] = 5, 6
    full.token_freq = torch.bincount(full.x_train.flatten(), minlength=7)
    full.y_train = torch.zeros(25, dtype=torch.long)
    drawn = ALL["sampler"].get("grad_softmax").build(full, torch.Generator().manual_seed(1), batch_size=20, gamma=0.5)
    drawn.L, drawn.seen = sampler.L.clone(), sampler.seen.clone()
    tokens = torch.cat([full.x_train[drawn.next()][:, [0, 2]].flatten() for _ in range(2000)])
    assert torch.allclose(torch.bincount(tokens, minlength=5).float() / len(tokens), expected, atol=0.01)
