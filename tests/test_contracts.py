"""The contract of every component kind, the registry's rules, and every built-in component run
for a few steps on a tiny task."""

import ast
import json
import math
import re
import textwrap

import pytest
import torch
from conftest import REPO, as_cells, cli, metrics_text, plugin_package, run_cli
from torch import nn

from suite import SuiteError, build, register_model
from suite.cli import main
from suite.engine.plan import blocker
from suite.engine.train import train
from suite.specs.contracts import ContractError
from suite.specs.registry import ALL, RUNNERS, Registry
from suite.specs.spec import resolve

# --- the contracts, checked as components register ------------------------------------------------


def _task_seed_keyword(*, seed: int = 0, n: int = 3): ...
def _task_extra_positional(seed, n): ...
def _model(data, *, d: int = 4): ...
def _opt(groups, *, lr: float = 1e-2): ...
def _sampler_named(data, generator, *, name: str = "x"): ...
def _filter_untyped(params, *, window=None): ...
def _filter_list(params, *, sizes: list = ()): ...
def _filter_required_keyword(params, *, k: int): ...
def _runner_with_settings(spec, run_dir, device, *, extra: int = 1): ...


@pytest.mark.parametrize(
    "kind, fn, info, message",
    [
        (
            "task",
            _task_seed_keyword,
            {},
            r"task 'bad' must take \(seed\) first, then settings with defaults; it takes \(\)",
        ),
        ("task", _task_extra_positional, {}, r"must take \(seed\) first, .* it takes \(seed, n\)"),
        ("model", _model, {}, r"model 'bad' must say inputs= when it registers"),
        (
            "opt",
            _opt,
            {"elementwize": True},
            r"optimizer 'bad' got unknown keyword\(s\) elementwize; optimizer knows elementwise",
        ),
        ("sampler", _sampler_named, {}, r"cannot have a setting called 'name'"),
        ("filter", _filter_untyped, {}, r"setting 'window' needs a type annotation"),
        ("filter", _filter_list, {}, r"setting 'sizes' needs a type annotation"),
        ("filter", _filter_required_keyword, {}, r"setting 'k' needs a default"),
        ("task", _task_seed_keyword, {"runner": "x", "default_model": "mlp"}, r"must take \(seed\)"),
        ("model", _model, {"inputs": ("tokens",), "opt_defaults": {"adam": {"lr": 1e-3}}}, r"opt_defaults must map"),
    ],
)
def test_a_component_that_breaks_its_contract_is_refused_naming_its_file(kind, fn, info, message):
    with pytest.raises(ContractError, match=r"^\S*test_contracts\.py:\d+: .*" + message):
        Registry(kind).register("bad", **info)(fn)


def test_runner_settings_are_allowed_to_exist_only_as_fixed_arguments():
    Registry("runner").register("ok")(lambda spec, run_dir, device: {})
    Registry("runner").register("with_settings")(_runner_with_settings)  # settings with defaults are fine
    with pytest.raises(ContractError, match=r"must take \(spec, run_dir, device\)"):
        Registry("runner").register("bad")(lambda spec: {})


def test_a_contract_error_is_one_line_exit_2_from_the_cli(tmp_path):
    env = plugin_package(
        tmp_path,
        "from suite import register_task\n\n@register_task('seedless')\ndef seedless(*, seed: int = 0):\n    pass\n",
    )
    # a process of its own: an installed distribution's entry points are read once, as a process starts
    proc = run_cli("run", "--task", "seedless", "--out", tmp_path / "run", env=env)
    assert proc.returncode == 2 and not (tmp_path / "run").exists()
    # the module failed to register: its import costs one warning, and the task is unknown
    assert re.search(
        r"^warning: skipped entry point .*outside_pkg/__init__\.py:\d+: task 'seedless' must take \(seed\)",
        proc.stderr,
        re.M,
    ), proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown task 'seedless'")


# --- the registry: clashes, origins, broken modules, patterns --------------------------------------


def test_a_taken_name_is_refused_unless_override_is_asked_for():
    reg = Registry("opt", "optimizer")

    def first(groups): ...

    def second(groups): ...

    reg.register("x", elementwise=True)(first)
    reg.register("x", elementwise=True)(first)  # the same builder again (a reloaded module) is no clash
    with pytest.raises(
        SuiteError,
        match=r"test_contracts\.py:\d+: optimizer 'x' is already registered by "
        r"\S*test_contracts\.py:\d+; pick another name, or .*override=True",
    ):
        reg.register("x")(second)
    assert reg.get("x").build is first and reg.get("x").info == {"elementwise": True}
    reg.register("x", override=True)(second)
    assert reg.get("x").build is second


def test_a_builtin_cannot_be_replaced_by_accident():
    from suite import register_optimizer

    def sgd(groups, *, lr: float = 0.1):
        return torch.optim.SGD(groups.all, lr=lr)

    with pytest.raises(SuiteError, match="optimizer 'sgd' is already registered by .*optimizers.py"):
        register_optimizer("sgd")(sgd)
    assert ALL["opt"].get("sgd").info["elementwise"] is True


def test_every_entry_knows_where_it_comes_from():
    assert re.fullmatch(r".*suite/components/optimizers\.py:\d+", ALL["opt"].get("adam").origin)
    assert re.fullmatch(r".*tasks/modular\.py:\d+", ALL["task"].get("modular").origin)
    proc = cli("list", "opt", "--origin")
    assert re.search(r"^\s+from \S+suite/components/optimizers\.py:\d+$", proc.stdout, re.M), proc.stdout


def test_a_module_that_fails_to_import_costs_one_warning_and_the_rest_work(tmp_path):
    env = plugin_package(tmp_path, "import no_such_dependency_here\n", ep_name="broken")
    proc = run_cli("list", "opt", env=env)  # processes of their own: entry points are read as a process starts
    assert proc.returncode == 0
    assert proc.stderr.strip().splitlines() == [
        "warning: skipped entry point broken (outside_pkg): "
        "ModuleNotFoundError: No module named 'no_such_dependency_here'"
    ]
    assert re.search(r"^  adam\s", proc.stdout, re.M)
    run = run_cli(
        "run",
        "--steps",
        "10",
        "--set",
        "p=11",
        "--set",
        "batch_size=16",
        "--set",
        "eval_every=5",
        "--out",
        tmp_path / "run",
        env=env,
    )
    assert run.returncode == 0, run.stderr


def test_list_filters_names_with_wildcards():
    both = cli("list", "adam*").stdout
    names = re.findall(r"^  (\S+)\s", both, re.M)
    assert names == ["adam", "adamlr", "adamlr_adaptive", "adamw", "adamwlr"]
    assert re.findall(r"^  (\S+)\s", cli("list", "model", "*former*").stdout, re.M) == [
        "grokfast_transformer",
        "transformer",
    ]
    assert re.findall(r"^  (\S+)\s", cli("list", "runner").stdout, re.M) == ["probe"]
    none = cli("list", "zzz*")
    assert none.returncode == 2 and none.stderr.strip() == "error: no component matches 'zzz*'"
    typo = cli("list", "mdel")
    assert typo.returncode == 2 and "unknown kind 'mdel' (did you mean 'model'?)" in typo.stderr


# --- a model that cannot be stacked -------------------------------------------------------------------


@register_model("_gru", inputs=("tokens",))
class GRUModel(nn.Module):
    """torch's GRU has no vmap batching rule."""

    def __init__(self, data, *, d: int = 8):
        super().__init__()
        self.embed = nn.Embedding(data.vocab_size, d)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.out = nn.Linear(d, data.n_classes)

    def forward(self, x):
        h, _ = self.gru(self.embed(x))
        return self.out(h[:, -1])


@register_model("_solo", inputs=("tokens",), stackable=False)
class Solo(GRUModel):
    """Says it cannot be stacked."""


TINY = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 32, "train.steps": 20, "eval_every": 10}


def test_a_model_that_cannot_be_vmapped_trains_its_seeds_one_after_the_other(tmp_path, capsys):
    specs = [resolve({"model": "_gru"}, TINY, seed) for seed in (0, 1)]
    together = train(as_cells(specs, [tmp_path / "a0", tmp_path / "a1"]), torch.device("cpu"))
    err = capsys.readouterr().err
    assert re.search(
        r"^2 runs train one after the other: model '_gru' cannot be vmapped \(RuntimeError: "
        r"Batching rule not implemented for aten::gru",
        err,
        re.M,
    ), err
    alone = [train(as_cells([spec], [tmp_path / f"b{spec['seed']}"]), torch.device("cpu"))[0] for spec in specs]
    for a, b in zip(together, alone):
        assert a["steps"] == 20 and a["stack_size"] == 1
        assert metrics_text(tmp_path / f"a{a['spec']['seed']}") == metrics_text(tmp_path / f"b{b['spec']['seed']}")
    assert "one after the other" not in capsys.readouterr().err  # a single run just runs the plain model


def test_a_model_registered_unstackable_says_so():
    members = [build(resolve({"model": "_solo"}, TINY, seed)) for seed in (0, 1)]
    assert (
        blocker([m.spec for m in members], [m.model for m in members])
        == "model '_solo' is registered with stackable=False"
    )


@register_model("_typo_recipe", inputs=("tokens",), opt_defaults={"sgd": {"opt.betas": (0.9, 0.98)}})
class TypoRecipe(GRUModel):
    """Declares a setting for sgd that sgd does not take."""


def test_a_model_s_declared_default_its_optimizer_does_not_take_is_one_line_when_chosen_and_list_shows_them(capsys):
    with pytest.raises(SuiteError, match=r"^model '_typo_recipe' declares opt.betas for optimizer 'sgd', which takes"):
        resolve({"model": "_typo_recipe", "opt": "sgd"})
    assert resolve({"model": "_typo_recipe", "opt": "adam"})["opt"]["lr"] == 1e-2  # nothing declared for adam
    assert main(["list", "model", "transformer"]) == 0
    shown = capsys.readouterr().out
    assert "with --opt adamlr: opt.decoupled_weight_decay=True  opt.lr=0.001  opt.weight_decay=1.0" in shown


def test_a_sampler_that_is_not_a_sampler_is_one_line():
    from suite import register_sampler

    @register_sampler("_plain_object")
    class NotASampler:
        """Has next() but does not subclass suite.Sampler."""

        def __init__(self, data, generator):
            pass

        def next(self):
            return torch.arange(4)

    with pytest.raises(
        SuiteError, match=r"sampler '_plain_object' built a NotASampler, not a suite\.specs\.contracts\.Sampler"
    ):
        build(resolve({"sampler": "_plain_object"}, {k: v for k, v in TINY.items() if k != "batch_size"}))


# --- one component of each kind from a new module: the example in suite/specs/contracts.py's docstring ---


def test_the_example_adds_one_component_of_each_kind_from_a_new_module_and_runs_them(tmp_path):
    source = (REPO / "suite/specs/contracts.py").read_text()  # the example ends the module docstring
    code = source.split("<!-- example components -->")[1].split("```python")[1].split("```")[0]
    env = plugin_package(tmp_path, textwrap.dedent(code))
    listing = run_cli("list", "--origin", env=env)  # processes of their own: entry points are read at a start
    for kind_heading, name in (
        ("tasks", "parity"),
        ("models", "bag"),
        ("optimizers", "adagrad"),
        ("samplers", "cyclic"),
        ("filters", "clip"),
        ("runners", "majority"),
    ):
        assert re.search(
            rf"^{kind_heading}:\n(?:  .*\n)*?  {name}\s+\S.*\n(?:   .*\n)*?\s+from \S*outside_pkg/__init__\.py",
            listing.stdout,
            re.M,
        ), (name, listing.stdout + listing.stderr)
    args = [
        "run",
        "--task",
        "parity",
        "--model",
        "bag",
        "--opt",
        "adagrad",
        "--sampler",
        "cyclic",
        "--filter",
        "clip",
        "--set",
        "n_bits=6",
        "--steps",
        "30",
        "--set",
        "eval_every=10",
        "--set",
        "checkpoint_every=10",
    ]
    proc = run_cli(*args, "--out", tmp_path / "run", env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "run/result.json").read_text())
    assert result["spec"]["task"] == {"name": "parity", "n_bits": 6, "train_frac": 0.5}
    assert (
        result["spec"]["sampler"] == {"name": "cyclic", "batch_size": 32} and result["spec"]["filter"]["limit"] == 1.0
    )
    assert result["steps"] == 30 and result["runner"] == "train"
    seeds = run_cli(*args, "--seeds", "0,1", "--root", tmp_path / "runs", env=env)  # elementwise: one stack
    assert seeds.returncode == 0 and "one after the other" not in seeds.stderr, seeds.stderr
    floor = run_cli("run", "--task", "parity_floor", "--out", tmp_path / "floor", env=env)
    assert floor.returncode == 0, floor.stderr
    measured = json.loads((tmp_path / "floor/result.json").read_text())
    assert measured["runner"] == "majority" and set(measured["spec"]) == {"task", "model", "seed"}
    assert 0.3 < measured["val_acc"] < 0.7  # parity's labels are balanced


# --- every built-in component, a few steps on a tiny task --------------------------------------------

BUILTIN = ("suite.tasks.", "suite.models.", "suite.components.")
TINY_TASK = {  # task -> (settings, a model that reads it)
    "modular": ({"p": 11, "train_frac": 0.5, "test_frac": 0.3}, "mlp"),
    "polygons": ({"resolution": 16, "train_frac": 0.004, "n_val": 24}, "mlp"),
    "zipf_text": ({"n_examples": 600, "vocab": 60}, "mlp"),
    "permutation": ({"train_frac": 0.5}, "mlp"),
    "sparse_parity": ({"n_bits": 12, "k": 2, "n_examples": 200}, "mlp"),
}
TINY_MODEL = {
    "mlp": {"d": 8, "hidden": 16},
    "transformer": {"d_model": 16, "d_mlp": 32},
    "grokfast_transformer": {"d": 16},
    "resnet18": {},
}
TEXT_MODELS = {"smollm2", "minilm", "hf"}  # pretrained, read by the probe runner (tests/test_probe.py runs them)


def _builtins(kind: str) -> list[str]:
    return [n for n in ALL[kind].names() if ALL[kind].get(n).build.__module__.startswith(BUILTIN)]


@pytest.fixture(scope="module")
def polygon_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SUITE_CACHE", str(tmp_path_factory.mktemp("suite-cache")))
        yield


def _few_steps(tmp_path, choices: dict, settings: dict | None = None) -> dict:
    task = choices.get("task", "modular")
    task_settings, model = TINY_TASK[task]
    model = choices.get("model", model)
    batch = {"batch_size": 16} if "batch_size" in ALL["sampler"].get(choices.get("sampler", "random")).params else {}
    spec = resolve(
        {"model": model, **choices},
        {**task_settings, **TINY_MODEL.get(model, {}), **batch, "train.steps": 4, "eval_every": 2, **(settings or {})},
    )
    (result,) = train(as_cells([spec], [tmp_path / "run"]), torch.device("cpu"))
    records = [json.loads(line) for line in metrics_text(tmp_path / "run").splitlines()]
    assert [r["step"] for r in records] == [0, 2, 4] and all(math.isfinite(r["train_loss"]) for r in records)
    assert result["steps"] == 4
    return result


def test_every_builtin_task_and_model_has_a_tiny_setting():
    runner_tasks = {n for n in _builtins("task") if "runner" in ALL["task"].get(n).info}
    assert set(_builtins("task")) - runner_tasks == set(TINY_TASK)
    assert set(_builtins("model")) == set(TINY_MODEL) | TEXT_MODELS


@pytest.mark.parametrize("task", sorted(TINY_TASK))
def test_every_builtin_task_trains(tmp_path, polygon_cache, task):
    _few_steps(tmp_path, {"task": task})


@pytest.mark.parametrize("model", sorted(TINY_MODEL))
def test_every_builtin_model_trains(tmp_path, polygon_cache, model):
    task = "modular" if "tokens" in ALL["model"].get(model).info["inputs"] else "polygons"
    _few_steps(tmp_path, {"task": task, "model": model})


@pytest.mark.parametrize("opt", _builtins("opt"))
def test_every_builtin_optimizer_trains(tmp_path, opt):
    _few_steps(tmp_path, {"opt": opt})


@pytest.mark.parametrize("sampler", _builtins("sampler"))
def test_every_builtin_sampler_trains(tmp_path, sampler):
    _few_steps(tmp_path, {"sampler": sampler})


@pytest.mark.parametrize("grad_filter", _builtins("filter"))
def test_every_builtin_filter_trains(tmp_path, grad_filter):
    settings = {"window": 2} if "window" in ALL["filter"].get(grad_filter).params else {}
    _few_steps(tmp_path, {"filter": grad_filter}, settings)


def test_every_builtin_runner_is_named_by_a_task():
    """Runners run through their tasks (the probe's end to end: tests/test_probe.py)."""
    named = {ALL["task"].get(n).info["runner"] for n in ALL["task"].names() if "runner" in ALL["task"].get(n).info}
    builtin = {n for n in RUNNERS.names() if RUNNERS.get(n).build.__module__.startswith(BUILTIN)}
    assert builtin == named == {"probe"}


# --- no import cycles in suite/ ------------------------------------------------------------------------


def test_suite_has_no_import_cycles():
    """Every import between suite's modules, at module level or inside a function, points one way."""
    modules = {}
    for path in (REPO / "suite").rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from a import b`: the module a.b if there is one, else a (a name defined in it)
                targets = [
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                    for alias in node.names
                ]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    done, path = set(), []

    def visit(node):
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(node) :] + [node]))
        if node in done:
            return
        path.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_listing_into_a_closed_pipe_is_quiet():
    import subprocess
    import sys

    proc = subprocess.run(  # a process of its own: the reader that leaves is another process
        f"{sys.executable} -m suite list | head -1", shell=True, capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert proc.stdout == "tasks:\n" and "Traceback" not in proc.stderr, proc.stderr
