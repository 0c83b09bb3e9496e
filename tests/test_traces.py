"""What the engine computes, pinned: the first ten steps of one tiny run per method of the headline board
(and the other models and samplers), against the losses recorded in traces.json.

A run's id hashes its spec, and suite/specs/code.py refuses to reuse a run whose component code changed,
but an edit to the engine (the split, the initialisation, the batches a seed draws, the step) changes no
id: committed runs would then stand beside new ones that the same spec trains to other numbers. The
boards' own runs cannot tell: by step 50 rounding from another CPU's kernels parts a replay from its
record as far as other batches do. At step 1 to 10 they are far apart: other kernel sets (ATen's default
path, MKL's compatible branch, two threads) moved these losses by at most 2e-7, a seed drawing other
batches by 6e-4 or more. A relative 1e-5 leaves rounding 50 times what it took here and catches the rest.

traces.json was written by an engine that replays the headline board's runs made on its machine bit for
bit (`suite replay`), under the engine's computation number (COMPUTATION, suite/specs/code.py), which
runs and boards record. A change meant to move the numbers bumps COMPUTATION, says so where the boards
are (their runs were made by the old engine), and writes the traces again: `python tests/test_traces.py`,
which refuses while COMPUTATION is unchanged and the numbers moved.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cli

from suite.specs.code import COMPUTATION

TRACES = Path(__file__).with_name("traces.json")
TOLERANCE = 1e-5  # relative, at every step
STEPS = ["--steps", "10", "--set", "eval_every=1", "--set", "batch_size=32"]
MLP = ["--set", "d=16", "--set", "hidden=32"]
MODULAR = ["--set", "p=23", "--set", "train_frac=0.5", *MLP]
CASES = {
    "adam": [*MODULAR, "--opt", "adam", "--set", "weight_decay=0.1"],
    "adamw": [*MODULAR, "--opt", "adam", "--set", "decoupled_weight_decay=true", "--set", "weight_decay=0.5"],
    "adamlr": [*MODULAR, "--opt", "adamlr"],
    "muon": [*MODULAR, "--opt", "muon"],
    "sgd": [*MODULAR, "--opt", "sgd"],
    "grokfast": [*MODULAR, "--filter", "grokfast_ema"],
    "orthograd": [*MODULAR, "--filter", "orthograd"],
    "grad_softmax": [*MODULAR, "--sampler", "grad_softmax"],
    "frequency": [*MODULAR, "--sampler", "frequency"],
    "permutation": ["--task", "permutation", "--set", "train_frac=0.1", *MLP],
    "transformer": ["--set", "p=23", "--model", "transformer", "--set", "d_model=16", "--set", "n_heads=2",
                    "--set", "d_mlp=32"],
}  # fmt: skip


def trace(case: str, tmp: Path) -> dict[str, list[float]]:
    """The case's losses at steps 0-10, trained now."""
    proc = cli("run", *CASES[case], *STEPS, "--out", tmp / case)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp / case / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(11))
    return {key: [r[key] for r in rows] for key in ("train_loss", "val_loss")}


def moved(recorded: dict[str, list[float]], now: dict[str, list[float]]) -> str | None:
    """The first loss that moved past TOLERANCE, said in one phrase; None if none did."""
    for key, losses in recorded.items():
        for step, (then, this) in enumerate(zip(losses, now[key], strict=True)):
            if abs(this - then) > TOLERANCE * abs(then):
                return f"{key} at step {step} is {this}, traces.json says {then}"
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_first_steps_train_the_recorded_losses(case, tmp_path):
    traces = json.loads(TRACES.read_text())
    why = moved(traces["cases"][case], trace(case, tmp_path))
    assert why is None, (
        f"{case}: {why} (written at {traces['commit']}): the engine no longer computes computation {COMPUTATION}; "
        "if that is meant, bump COMPUTATION (suite/specs/code.py) and write the traces again"
    )


def test_the_traces_are_of_this_computation_and_cover_every_case():
    traces = json.loads(TRACES.read_text())
    assert traces["computation"] == COMPUTATION, (
        "COMPUTATION changed: write the traces again (python tests/test_traces.py)"
    )
    assert sorted(traces["cases"]) == sorted(CASES)


if __name__ == "__main__":  # write traces.json from this checkout's engine
    import tempfile

    old = json.loads(TRACES.read_text()) if TRACES.exists() else {"computation": None, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        cases = {case: trace(case, Path(tmp)) for case in sorted(CASES)}
    if old["computation"] == COMPUTATION:
        changed = [
            f"{case}: {why}"
            for case in cases
            if case in old["cases"] and (why := moved(old["cases"][case], cases[case]))
        ]
        if changed:
            sys.exit(f"the numbers moved under computation {COMPUTATION} ({changed[0]}): bump COMPUTATION first")
    commit = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=REPO, capture_output=True, text=True)
    TRACES.write_text(
        json.dumps({"computation": COMPUTATION, "commit": commit.stdout.strip(), "cases": cases}, indent=1) + "\n"
    )
    print(f"{TRACES}: {len(cases)} cases, computation {COMPUTATION}", file=sys.stderr)
