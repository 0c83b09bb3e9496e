"""A run records the code of each component it was made by, and a finished (or checkpointed) run
made by other code of a component is never reused silently: the command names the component and
stops, or with --rerun-changed runs the cell again. Runs made before the record existed are reused.
A user's plugin is run in processes of its own (run_cli): its code is read, hashed and registered once
a process, and each run here must see the code as it is on disk then."""

import json

from conftest import TINY_FIXED, cli, plugin_package, run_cli

# A user's optimizer in a package of their own, registered through the suite.optimizers entry point.
PLUGIN = '''
import torch
from suite import register_optimizer


@register_optimizer("myadam", elementwise=True)
def myadam(groups, *, lr: float = 0.01):
    """Adam without weight decay: a method under development."""
    return torch.optim.Adam(groups.all, lr=lr)
'''
RUN = ["run", "--opt", "myadam", "--set", "p=23", "--set", "batch_size=64", "--steps", "40", "--set", "eval_every=20"]


def _edit(tmp_path, change: str) -> None:
    module = tmp_path / "outside_pkg/__init__.py"
    module.write_text(module.read_text() + change)


def test_a_run_records_its_components_code_and_is_not_reused_once_the_plugin_s_code_changes(tmp_path):
    env = plugin_package(tmp_path, PLUGIN, ep_name="myadam", group="suite.optimizers")
    out = tmp_path / "run"
    first = run_cli(*RUN, "--out", out, env=env)
    assert first.returncode == 0, first.stderr
    result = json.loads((out / "result.json").read_text())
    code = result["code"]["opt"]
    assert code["module"] == "outside_pkg" and code["package"] == "outside-pkg" and code["version"] == "0.1"
    assert result["code"]["model"]["package"] == "grokking-suite" and len(code["code_sha256"]) == 64
    assert json.loads((out / "code.json").read_text()) == result["code"]

    again = run_cli(*RUN, "--out", out, env=env)  # the same code: the finished run is the answer
    assert again.returncode == 0 and "already finished" in again.stderr

    # reworded text is not other code: a comment, a docstring
    module = tmp_path / "outside_pkg/__init__.py"
    module.write_text(module.read_text().replace("method under development", "method being developed") + "\n# a note\n")
    reworded = run_cli(*RUN, "--out", out, env=env)
    assert reworded.returncode == 0 and "already finished" in reworded.stderr, reworded.stderr

    _edit(tmp_path, "\nSCALE = 2.0  # the researcher changed the update\n")
    before = (out / "result.json").read_bytes()
    stale = run_cli(*RUN, "--out", out, env=env)
    lines = stale.stderr.strip().splitlines()
    assert stale.returncode == 2 and len(lines) == 1, stale.stderr
    assert "made by other code of opt 'myadam' (outside_pkg" in lines[0] and "--rerun-changed" in lines[0]
    assert (out / "result.json").read_bytes() == before  # nothing touched

    rerun = run_cli(*RUN, "--out", out, "--rerun-changed", env=env)
    assert rerun.returncode == 0 and "already finished" not in rerun.stderr, rerun.stderr
    now = json.loads((out / "result.json").read_text())["code"]["opt"]["code_sha256"]
    assert now != code["code_sha256"]


# The same optimizer, its step size set by a helper module of its package, and a dependency of its own
HELPED = """
import torch
import fakedep
from suite import register_optimizer
from outside_pkg.core import step_size


@register_optimizer("myadam", elementwise=True)
def myadam(groups, *, lr: float = 0.01):
    return torch.optim.Adam(groups.all, lr=step_size(lr))
"""


def test_an_edit_to_a_helper_module_or_a_dependency_s_version_is_other_code(tmp_path):
    env = plugin_package(tmp_path, HELPED, ep_name="myadam", group="suite.optimizers")
    (tmp_path / "outside_pkg/core.py").write_text('def step_size(lr):\n    """As given."""\n    return lr\n')
    (tmp_path / "fakedep").mkdir()
    (tmp_path / "fakedep/__init__.py").write_text("")
    meta = tmp_path / "fakedep-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedep\nVersion: 1.0\n")
    (meta / "top_level.txt").write_text("fakedep\n")
    out = tmp_path / "run"
    assert run_cli(*RUN, "--out", out, env=env).returncode == 0
    code = json.loads((out / "code.json").read_text())["opt"]
    assert code["modules"] == ["outside_pkg", "outside_pkg.core"] and code["imports"] == {"fakedep": "1.0"}

    (tmp_path / "fakedep-1.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: fakedep\nVersion: 2.0\n")
    moved = run_cli(*RUN, "--out", out, env=env)
    assert moved.returncode == 2 and "fakedep 1.0 -> 2.0" in moved.stderr, moved.stderr
    (tmp_path / "fakedep-1.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: fakedep\nVersion: 1.0\n")

    core = tmp_path / "outside_pkg/core.py"
    core.write_text(core.read_text().replace('"""As given."""', '"""The lr as the user gave it."""'))
    assert "already finished" in run_cli(*RUN, "--out", out, env=env).stderr  # a docstring: the same code
    core.write_text(core.read_text().replace("return lr", "return 10 * lr"))
    stale = run_cli(*RUN, "--out", out, env=env)
    assert stale.returncode == 2 and "made by other code of opt 'myadam'" in stale.stderr, stale.stderr


def test_a_run_recorded_by_its_module_s_text_is_compared_by_that_text(tmp_path):
    # code.json of runs made before code_sha256: a hash of the module's text, which still decides for them
    import hashlib

    from suite.specs.code import changed, code_of
    from suite.specs.spec import resolve

    spec = resolve()
    recorded = code_of(spec)
    path = __import__("suite.components.optimizers").components.optimizers.__file__
    text = hashlib.sha256(open(path, "rb").read()).hexdigest()
    older = {
        kind: {k: v for k, v in c.items() if k not in ("code_sha256", "modules", "imports")}
        for kind, c in recorded.items()
    }
    older["opt"]["source_sha256"] = text
    assert changed(older, spec) is None
    older["opt"]["source_sha256"] = "0" * 64
    assert "opt 'adam' (suite.components.optimizers: source 00000000 ->" in changed(older, spec)


def test_a_grid_stops_on_run_folders_made_by_other_code_and_reruns_them_when_asked(tmp_path):
    env = plugin_package(tmp_path, PLUGIN, ep_name="myadam", group="suite.optimizers")
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\n' + TINY_FIXED + 'opt = "myadam"\n[axes]\nseed = [0, 1]\n')
    root = tmp_path / "runs"
    assert run_cli("grid", grid, "--root", root, env=env).returncode == 0
    _edit(tmp_path, "\nCHANGED = True\n")
    stale = run_cli("grid", grid, "--root", root, env=env)
    assert stale.returncode == 2 and stale.stderr.startswith("error: 2 of g's run folders were made by other code")
    dry = run_cli("grid", grid, "--root", root, "--rerun-changed", "--dry-run", env=env)
    assert dry.returncode == 0 and len(dry.stdout.splitlines()) == 2  # listed to run, nothing removed
    assert len(list(root.rglob("result.json"))) == 2
    rerun = run_cli("grid", grid, "--root", root, "--rerun-changed", env=env)
    assert rerun.returncode == 0, rerun.stderr
    codes = {json.loads(f.read_text())["code"]["opt"]["code_sha256"] for f in root.rglob("result.json")}
    assert len(codes) == 1 and len(list(root.rglob("result.json"))) == 2


def test_a_run_made_before_code_was_recorded_is_reused(tmp_path):
    out = tmp_path / "run"
    args = ["run", "--set", "p=23", "--set", "batch_size=64", "--steps", "20", "--set", "eval_every=10", "--out", out]
    assert cli(*args).returncode == 0
    (out / "code.json").unlink()  # as every run committed before the record existed
    result = json.loads((out / "result.json").read_text())
    del result["code"]
    (out / "result.json").write_text(json.dumps(result))
    again = cli(*args)
    assert again.returncode == 0 and "already finished" in again.stderr


def test_a_stack_opening_in_threads_hashes_each_component_s_code_once(monkeypatch):
    # write_all opens a stack's runs side by side; each would otherwise hash the code itself (seconds each)
    import threading

    from suite.specs import code
    from suite.specs.spec import resolve

    code._identity.cache_clear()
    hashed, own_modules = [], code._own_modules
    monkeypatch.setattr(code, "_own_modules", lambda module: hashed.append(module) or own_modules(module))
    spec, together = resolve({}, {}, 0), threading.Barrier(8, timeout=30)

    def open_one():
        together.wait()
        return code.code_of(spec)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(hashed) == len(code.KINDS)  # once per component (each kind's is another function)


def test_a_run_of_another_computation_is_not_reused_and_one_recorded_before_the_number_is(tmp_path):
    # the engine's code is not hashed: its computation number stands for it (suite/specs/code.py)
    from suite.specs.code import COMPUTATION

    out = tmp_path / "run"
    args = ["run", "--set", "p=23", "--set", "batch_size=64", "--steps", "20", "--set", "eval_every=10", "--out", out]
    assert cli(*args).returncode == 0
    code = json.loads((out / "code.json").read_text())
    assert code["engine"] == {"computation": COMPUTATION}
    (out / "code.json").write_text(json.dumps(code | {"engine": {"computation": COMPUTATION - 1}}))
    refused = cli(*args)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        f"error: {out} was made by other code of the engine (computation {COMPUTATION - 1} -> {COMPUTATION}): "
        "rerun it with --rerun-changed, or choose another --root (or --out)"
    )
    (out / "code.json").write_text(json.dumps({k: v for k, v in code.items() if k != "engine"}))
    again = cli(*args)  # made before runs recorded the number: reused, as runs made before code.json
    assert again.returncode == 0 and "already finished" in again.stderr
