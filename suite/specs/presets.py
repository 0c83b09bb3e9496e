"""Named configurations: a partial spec (component names + settings) that flags then override.

    python -m suite run --preset grokfast                       # Grokfast's baseline
    python -m suite run --preset grokfast --filter grokfast_ema # its EMA run (weight decay 0.005)
    python -m suite run --preset grokfast --set train.steps=10000 --opt adamlr

A preset gives component names (an explicit --task/--model/--opt/--sampler/--filter wins),
settings as `kind.key` (an explicit --set wins), and settings that apply only when a given
filter is chosen (the weight decay Grokfast pairs with each filter). A preset setting the
finally chosen component does not take is dropped, so swapping a component keeps what still
applies (e.g. --opt adamlr keeps lr and betas). The resolved spec, not the preset's name,
is what the run records.

`grokfast` is Grokfast's algorithmic-data setting as its public code (ironjr/grokfast main.py)
runs it, rather than as its README summarises it. Following their code: x*y mod 97 with y in
1..96 (9,312 pairs), a random 50/50 split (4,656 / 4,656); their decoder (`grokfast_transformer`:
2 layers, d 128, 4 heads, the first LayerNorm's output replacing the residual stream, GELU MLP,
causal attention, a bias-free head over all 99 tokens; with the same seed its initial weights
equal theirs); torch Adam, lr 1e-3, betas (0.9, 0.98), weight decay 0; a 10-step linear warmup
from lr 0; batches of 512 reshuffled every epoch with a short last batch (`--sampler epoch`:
9 x 512 + 48); val accuracy every epoch (10 steps); target 95% val accuracy. `--filter
grokfast_ema` brings weight decay 0.005 and `--filter grokfast_ma` 0.01, as their README's
commands do. Not as in their code: the operator and '=' token ids are swapped (a relabelling of
two embedding rows); the split and the batches come from the suite's seeded generators, so seed
0 is not their split; train accuracy is measured on the whole training set after the update,
not as a running mean over the epoch. `python -m suite list preset` lists the presets. What the
preset measured here: leaderboards/grokfast/ and leaderboards/README.md.

`egd` is egalitarian gradient descent's modular-addition setting from its public code, on the suite's
one-hot MLP (the preset says where the model, suite/components/egalitarian.py where the filter
differs from theirs); `--filter none` is its SGD baseline. It does not reproduce their speed: in one
short check (seed 0, 1,600 steps) it memorized at step 112 and reached val accuracy 0.25, where their
script on their model passed 95% test accuracy at epoch 59 (~900 steps; its SGD had train accuracy
0.17 after 150 epochs, the preset's SGD 0.02 after 100). Whitening the first layer only, as their
script does, did not close the gap (val 0.20 at step 848): the model's differences remain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from suite.errors import SuiteError
from suite.specs.registry import ALL, _closest


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    choices: dict[str, str]
    settings: dict[str, Any]
    per_filter: dict[str, dict[str, Any]] = field(default_factory=dict)

    def describe(self) -> list[str]:
        """Lines for `suite list`: the components, the settings, the per-filter settings."""
        show = lambda d: "  ".join(f"{k}={v!r}" for k, v in d.items())  # noqa: E731
        return [show(self.choices), show(self.settings)] + [
            f"with --filter {name}: {show(extra)}" for name, extra in self.per_filter.items()
        ]


GROKFAST = Preset(
    name="grokfast",
    summary="Grokfast's algorithmic-data setting, as its public code (ironjr/grokfast main.py) runs it",
    choices={"task": "modular", "model": "grokfast_transformer", "opt": "adam", "sampler": "epoch", "filter": "none"},
    settings={
        # Data: x*y mod 97 with y in 1..96 (9,312 pairs), half for training (4,656 / 4,656).
        # The operator and '=' ids are swapped relative to their code (op 97, '=' 98 here):
        # a relabelling of two embedding rows, nothing else.
        "task.p": 97,
        "task.op": "mul",
        "task.nonzero_b": True,
        "task.split": "random",
        "task.test_frac": 0.5,
        "task.train_frac": 0.5,
        # Model: their Decoder (2 layers, d 128, 4 heads; see models/grokfast_transformer.py).
        "model.d": 128,
        "model.layers": 2,
        "model.heads": 4,
        # Optimizer: torch Adam (coupled L2), lr 1e-3, betas (0.9, 0.98); weight decay 0 in the baseline.
        "opt.lr": 1e-3,
        "opt.betas": (0.9, 0.98),
        "opt.eps": 1e-8,
        "opt.weight_decay": 0.0,
        # Batches: reshuffled every epoch, 9 x 512 + 1 x 48 per epoch.
        "sampler.batch_size": 512,
        # Loop: 10-step linear warmup from lr 0; val accuracy after every epoch (10 steps);
        # target 95% val (their table's "iterations to reach 95% val. acc.").
        "train.warmup_steps": 10,
        "train.eval_every": 10,
        "train.target": 0.95,
        "train.steps": 50_000,
        "train.chance_patience": None,  # their runs go on to the budget whatever the accuracy
    },
    # Their README's commands: EMA with --weight_decay 0.005, MA with --weight_decay 0.01;
    # the filters' own defaults (alpha 0.98 / lamb 2; window 100 / lamb 5) are theirs.
    per_filter={"grokfast_ema": {"opt.weight_decay": 0.005}, "grokfast_ma": {"opt.weight_decay": 0.01}},
)

ORTHOADAMW = Preset(
    name="orthoadamw",
    summary="Prieto et al.'s orthogonal AdamW with StableMax, no weight decay, full batch (arXiv 2501.04697)",
    choices={"task": "modular", "model": "mlp", "opt": "adamw", "sampler": "full", "filter": "orthograd"},
    settings={
        # Their MLP runs (run_main_experiments.sh, Fig. 6): a+b mod 113, 40% of the pairs trained on,
        # the rest the test set, full-batch steps, lr 0.005, --orthogonal_gradients.
        "task.p": 113,
        "task.train_frac": 0.4,
        "task.test_frac": 0.6,
        "opt.lr": 5e-3,
        # What their code's AdamW actually ran: OrthoGrad builds its inner AdamW from lr and weight_decay
        # alone, so the inner optimizer keeps torch's defaults, betas (0.9, 0.999) and eps 1e-8 (the
        # --beta2 and --adam_epsilon flags reach only the outer wrapper's param groups); weight_decay 0.
        "opt.weight_decay": 0.0,
        "opt.betas": (0.9, 0.999),
        "opt.eps": 1e-8,
        # StableMax (their Fig. 1 runs it alone); the paper proposes both together against softmax collapse.
        "train.loss": "stablemax",
    },
)

EGD = Preset(
    name="egd",
    summary="Pasand & Dohmatob's egalitarian gradient descent in their modular-addition setting (arXiv 2510.04930)",
    choices={"task": "modular", "model": "mlp", "opt": "sgd", "sampler": "epoch", "filter": "egd"},
    settings={
        # Their main-results/mod_add.py (asahebpa/Egalitarian-Gradient-Descent): a+b mod 127, half of the
        # pairs trained on, the other half the test set; the two operands one-hot into one hidden layer of
        # 512 ReLUs. The suite's one-hot MLP differs: it also reads the constant op and '=' tokens, its head
        # has a bias, and its weights start at torch's default init (theirs: He-normal, a bias-free head).
        "task.p": 127,
        "task.train_frac": 0.5,
        "task.test_frac": 0.5,
        "model.inputs": "onehot",
        "model.hidden": 512,
        # Plain SGD at lr 0.7 with L2 1e-4 (theirs in the loss on the weights only; SGD's on every parameter).
        "opt.lr": 0.7,
        "opt.momentum": 0.0,
        "opt.weight_decay": 1e-4,
        # Batches of 512 reshuffled every epoch (they drop the short last batch; the epoch sampler keeps it),
        # evaluated every epoch; their figure is the first epoch past 95% test accuracy (first_touch_step).
        "sampler.batch_size": 512,
        "train.eval_every": 16,
        "train.target": 0.95,
        "train.steps": 50_000,
        "train.chance_patience": None,  # their runs go on to the budget whatever the accuracy
    },
)

PRESETS = {p.name: p for p in (GROKFAST, ORTHOADAMW, EGD)}


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise SuiteError(f"unknown preset '{name}'{_closest(name, PRESETS)}; known: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]


def apply(name: str, choices: dict[str, str | None], settings: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Choices and settings for `resolve`: the preset's, overridden by the explicit ones."""
    from suite.specs.spec import DEFAULTS, train_params

    preset = get(name)
    chosen = {**preset.choices, **{k: v for k, v in choices.items() if v is not None}}
    merged = {**preset.settings, **preset.per_filter.get(chosen.get("filter", DEFAULTS["filter"]), {})}
    kept = {}
    for key, value in merged.items():
        kind, _, bare = key.partition(".")
        params = train_params() if kind == "train" else ALL[kind].get(chosen.get(kind, DEFAULTS[kind])).params
        if bare in params:
            kept[key] = value
    return chosen, {**kept, **settings}
