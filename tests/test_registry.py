from typing import Literal, Optional

import pytest

from suite import SuiteError
from suite.specs.registry import ALL, Registry, params_of
from suite.specs.spec import resolve, spec_id


def test_contract_names_are_registered():
    assert "modular" in ALL["task"].names()
    assert "mlp" in ALL["model"].names()
    assert {"adam", "adamw", "sgd", "adamlr", "adamlr_adaptive"} <= set(ALL["opt"].names())
    assert {"random", "full", "frequency"} <= set(ALL["sampler"].names())


def test_unknown_name_names_the_closest():
    with pytest.raises(SuiteError, match="unknown optimizer 'adamm'.*did you mean 'adam'"):
        ALL["opt"].get("adamm")


def test_parameters_come_from_the_signature_with_types():
    def build(
        data,
        *,
        n: int = 3,
        rate: float = 0.5,
        mode: Literal["a", "b"] = "a",
        flag: bool = False,
        limit: Optional[int] = None,
        pair: tuple[float, float] = (1.0, 2.0),
    ):
        """A component."""

    params = params_of(build)
    assert list(params) == ["n", "rate", "mode", "flag", "limit", "pair"]  # `data` is wired, not a setting
    assert params["n"].parse("12") == 12
    assert params["rate"].parse("1e-3") == 1e-3
    assert params["flag"].parse("true") is True and params["flag"].parse("0") is False
    assert params["limit"].parse("none") is None and params["limit"].parse("7") == 7
    assert params["pair"].parse("0.9,0.98") == (0.9, 0.98)
    assert params["mode"].parse("b") == "b"
    with pytest.raises(SuiteError, match="not one of a, b"):
        params["mode"].parse("c")
    with pytest.raises(SuiteError, match="takes int"):
        params["n"].parse("1.5")
    with pytest.raises(SuiteError, match="takes int"):
        params["n"].check(2.5)


def test_a_decorator_registers_under_its_name():
    reg = Registry("thing")

    @reg.register("widget", inputs=("tokens",))
    def widget(x, *, size: int = 2):
        """Makes widgets."""

    entry = reg._entries["widget"]
    assert entry.summary == "Makes widgets." and entry.info == {"inputs": ("tokens",)}
    assert entry.params["size"].default == 2


def test_resolve_fills_every_default_and_routes_settings():
    spec = resolve({"opt": "adamlr"}, {"c": "4", "op": "mul", "opt.lr": "1e-3", "train.steps": "100"}, seed=3)
    assert spec["opt"] == {
        "name": "adamlr",
        "lr": 1e-3,
        "c": 4.0,
        "weight_decay": 1e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "decoupled_weight_decay": False,
    }
    assert spec["task"]["op"] == "mul" and spec["task"]["p"] == 97
    assert spec["train"]["steps"] == 100 and spec["seed"] == 3
    assert spec["sampler"] == {"name": "random", "batch_size": 512}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"nope": "1"}, "no chosen component takes 'nope'"),
        ({"lrr": "1"}, "did you mean 'lr'"),
        ({"model.c": "1"}, "the model 'mlp' does not take 'c'; it takes d, embed_init, hidden, inputs"),
        ({"p": "x"}, "p takes int"),
        ({"split": "zigzag"}, "not one of"),
    ],
)
def test_resolve_rejects_bad_settings(settings, message):
    with pytest.raises(SuiteError, match=message):
        resolve(None, settings)


def test_spec_id_is_stable_across_processes():
    import subprocess
    import sys

    code = "from suite.specs.spec import resolve, spec_id; print(spec_id(resolve()))"
    ids = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONHASHSEED": str(s), "PATH": ""}
        ).stdout.strip()
        for s in (1, 2)
    }
    assert ids == {spec_id(resolve())}
    assert spec_id(resolve(seed=1)) != spec_id(resolve(seed=0))
