"""The GPU campaign: the suite measured on one GPU in three parts, each to a deadline you give,
every result packed into an output folder (--out) of a few files.

    python tests/gpu_campaign.py check --out results/   # CUDA correctness, CPU vs GPU, the bench
    python tests/gpu_campaign.py grids --out results/   # the paper protocol (5 seeds), Nanda et al.'s setting
    python tests/gpu_campaign.py long  --out results/   # ResNet-18 on the polygons at 112 px, the tuned grid

On a machine whose Python has torch but not the suite's other dependencies (wandb, datasets, gguf:
the suite imports those only where it uses them), install it without them, from the repository root:

    pip install -q --no-deps --no-build-isolation -e . && python3 tests/gpu_campaign.py check --out results/

Every part works to a deadline (--budget-s, default 540 s): a step that would run past it is stopped
with SIGTERM (its runs checkpoint) and what it finished is packed, so a part killed at a time limit
never loses what it measured. Each part writes `<part>.json` (every step: its command, exit code, seconds
and figures), `<part>.md` (the same as a table, also printed last) and `<part>-runs.tar.gz` (the run
folders' spec, metrics and result files and the leaderboards made from them; no checkpoints or
weights). A part can run again: finished cells are skipped, as in any grid. A deadline that is no
time, a device this machine lacks or a folder that cannot be written stops a part before it runs, in
one line (exit 2); a part with a failed step says which in one line, after its report (exit 1).

--device cpu --quick runs every step on tiny settings in seconds: the path CI tests
(tests/test_campaign.py). A development tool: it drives the suite's command line and runs tests/,
so it lives beside them, not in the package. Steps:
- check: `pytest -m device` with SUITE_TEST_DEVICE set to the device (tests/test_device.py: a run, a
  stack, bf16, resume, tf32 on the device); the default cell on the device and on the CPU, every
  evaluation's losses compared (the largest relative difference, and the first evaluation past
  1e-3); `suite bench` on the device (a profile of the stack of 256; stacks 1, 32, 256, 1,024;
  every precision; torch.compile).
- grids: `suite/grids/paper.toml` (every cell, 5 seeds) and `adamlr_transformer.toml`'s `nanda`
  experiment (p = 113, full batch, AdamW and Adam-LR under decoupled decay), each with its leaderboard.
- long: `polygons_gpu.toml`'s 112px experiment, then `tuned.toml` (`suite tune`) with what is left.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from suite.cli import OneLineParser, guarded
from suite.errors import SuiteError
from suite.results.rundir import check_writable

PARTS = ("check", "grids", "long")
KEEP = ("spec.json", "metrics.jsonl", "result.json", "error.json", "tuning.json")
QUICK = ["--set=p=11", "--set=train_frac=0.5", "--set=test_frac=0.3", "--set=batch_size=16", "--set=eval_every=10"]
# --quick's stand-in for tuned.toml: the same protocol on one method, one point, in seconds
QUICK_TUNED = """name = "quick-tuned"
[fixed]
p = 11
train_frac = 0.5
test_frac = 0.3
batch_size = 16
d = 16
hidden = 32
"train.steps" = 40
eval_every = 10
[tuning]
trials = 1
tuning_seeds = [100]
final_seeds = [0, 1, 2, 3, 4]
[tuning.methods.adam]
opt = "adam"
space = { lr = [0.01] }
"""


class Campaign:
    def __init__(self, part: str, out: Path, work: Path, device: str, quick: bool, budget_s: float):
        self.part, self.out, self.work, self.device, self.quick = part, out, work, device, quick
        self.deadline = time.monotonic() + budget_s
        self.steps: list[dict] = []
        self.roots: list[Path] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, args: list[str], env: dict | None = None, share: float = 1.0) -> dict:
        """args under this Python, stopped by SIGTERM once `share` of the time left has passed."""
        limit = max(self.left() * share, 0.0)
        step = {"step": name, "command": " ".join(args), "limit_s": round(limit, 1)}
        t0 = time.monotonic()
        if limit < 5:
            step |= {"exit": None, "note": "skipped: the part's time ran out"}
        else:
            proc = subprocess.Popen(
                [sys.executable, *args],
                env={**os.environ, **(env or {})},
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                output, _ = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)  # the runs checkpoint; a grid stops its workers
                try:
                    output, _ = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    output, _ = proc.communicate()
                step["note"] = "stopped at the part's deadline (SIGTERM); its runs checkpointed"
            step |= {"exit": proc.returncode, "tail": output.strip().splitlines()[-15:]}
            print(f"[campaign] {name}: exit {proc.returncode} in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        step["seconds"] = round(time.monotonic() - t0, 1)
        self.steps.append(step)
        return step

    def suite(self, name: str, *args, share: float = 1.0) -> dict:
        return self.run(name, ["-m", "suite", *map(str, args)], share=share)

    def grid(self, name: str, grid: str, *args, share: float = 1.0, tune: bool = False) -> Path:
        """A grid (or `suite tune`) into work/name, several processes sharing the device, then its board."""
        root = self.work / name
        self.roots.append(root)
        workers = "1" if self.quick else "4"  # on a GPU, processes overlap each other's launch gaps
        self.suite(
            name,
            "tune" if tune else "grid",
            grid,
            "--root",
            root,
            "--workers",
            workers,
            "--device",
            self.device,
            *args,
            share=share,
        )
        board = root / "final" if tune else root
        if board.is_dir() and any(board.rglob("result.json")):
            self.suite(f"{name} leaderboard", "leaderboard", board, "--out", root / "leaderboard")
        return root

    def finish(self) -> Path:
        """<part>.json, <part>.md and <part>-runs.tar.gz in out; the table printed."""
        self.out.mkdir(parents=True, exist_ok=True)
        report = {"part": self.part, "device": self.device, "quick": self.quick, "steps": self.steps}
        (self.out / f"{self.part}.json").write_text(json.dumps(report, indent=1, default=str))
        rows = [f"| {s['step']} | {s['exit']} | {s['seconds']} | {s.get('note', '')} |" for s in self.steps]
        table = "\n".join(
            [f"# campaign {self.part} on {self.device}", "", "| step | exit | s | note |", "|---|---:|---:|---|", *rows]
        )
        (self.out / f"{self.part}.md").write_text(table + "\n")
        with tarfile.open(self.out / f"{self.part}-runs.tar.gz", "w:gz") as tar:
            for root in self.roots:
                for path in sorted(root.rglob("*")) if root.is_dir() else []:
                    if path.is_file() and (path.name in KEEP or "leaderboard" in path.relative_to(root).parts):
                        tar.add(path, arcname=str(path.relative_to(self.work)))
        print(table)
        return self.out


DEVICE_TESTS = Path(__file__).resolve().parent / "test_device.py"  # beside this script, from any folder


def check(c: Campaign) -> None:
    tests = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "device", str(DEVICE_TESTS)]
    c.run("device tests", tests, env={"SUITE_TEST_DEVICE": c.device}, share=0.3)
    steps = ["--set=train.steps=60"] + QUICK if c.quick else ["--set=train.steps=2500"]
    dirs = {"device": c.work / "default-device", "cpu": c.work / "default-cpu"}
    for where, device in (("device", c.device), ("cpu", "cpu")):  # on the CPU path: the CPU against itself
        c.suite(f"default cell on {device}", "run", "--device", device, "--out", dirs[where], *steps, share=0.3)
    c.roots += list(dirs.values())
    if all((d / "result.json").is_file() for d in dirs.values()):
        c.steps.append({"step": "cpu vs device", "exit": 0, "seconds": 0.0, **compare_runs(*dirs.values())})
    else:
        c.steps.append({"step": "cpu vs device", "exit": None, "seconds": 0.0, "note": "skipped: a run did not finish"})
    bench = ["--quick", "--skip", "plain"] if c.quick else ["--skip", "plain,probe", "--stacks", "1,32,256,1024"]
    c.suite("bench", "bench", "--device", c.device, "--out", c.out / "bench.json", *bench)


def compare_runs(a: Path, b: Path) -> dict:
    """Two runs of one spec on two devices, evaluation by evaluation: the largest relative difference of
    the train and val losses, and the first step where one passes 1e-3 (float32 rounding, carried by Adam,
    grows over a run; the grok steps say whether it changed the outcome)."""
    read = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (a, b)]
    worst, first_past = 0.0, None
    for ra, rb in zip(*read):
        rel = max(abs(ra[k] - rb[k]) / max(abs(rb[k]), 1e-12) for k in ("train_loss", "val_loss"))
        worst = max(worst, rel)
        if rel > 1e-3 and first_past is None:
            first_past = ra["step"]
    results = [json.loads((d / "result.json").read_text()) for d in (a, b)]
    return {
        "evaluations": min(map(len, read)),
        "max_relative_loss_difference": worst,
        "first_step_past_1e-3": first_past,
        "grok_steps": [r.get("grok_step") for r in results],
    }


def grids(c: Campaign) -> None:
    if c.quick:
        c.grid("paper", "tiny", share=0.5)
        c.grid("nanda", "tiny")
        return
    c.grid("paper", "paper", "--stack", "64", share=0.6)
    c.grid("nanda", "adamlr_transformer", "--experiment", "nanda", "--stack", "32")


def long(c: Campaign) -> None:
    if c.quick:
        c.grid("polygons", "tiny", share=0.5)
        (c.work / "quick-tuned.toml").write_text(QUICK_TUNED)
        c.grid("tuned", str(c.work / "quick-tuned.toml"), tune=True)
        return
    c.grid("polygons", "polygons_gpu", "--experiment", "112px", share=0.75)
    c.grid("tuned", "tuned", "--stack", "64", tune=True)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python tests/gpu_campaign.py", description=__doc__.split("\n\n")[0])
    p.add_argument("part", choices=PARTS)
    p.add_argument("--out", default="runs/campaign", help="where the packed results go (default runs/campaign)")
    p.add_argument("--work", default="runs/campaign-work", help="run folders (kept: a part resumes from them)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny settings, every step in seconds (the CPU path)")
    p.add_argument("--budget-s", type=float, default=540.0, help="the part's deadline (default 540 s)")
    return guarded(run_part, p.parse_args(argv))


def run_part(args) -> int:
    """The part's steps, after what would stop them all is checked (a deadline that is no time, a
    device this machine lacks, folders that cannot be written); exit code 1 if a step failed."""
    from suite.engine.train import resolve_device

    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise SuiteError(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    resolve_device(args.device)
    for path in (args.out, args.work):
        check_writable(path)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    c = Campaign(args.part, Path(args.out), work, args.device, args.quick, args.budget_s)
    {"check": check, "grids": grids, "long": long}[args.part](c)
    c.finish()
    failed = [s["step"] for s in c.steps if s["exit"] not in (0, None) and "deadline" not in s.get("note", "")]
    if failed:
        print(f"error: {len(failed)} of {len(c.steps)} steps failed ({', '.join(failed)}): {c.out / args.part}.md",
              file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
