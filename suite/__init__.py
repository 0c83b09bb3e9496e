"""A benchmark suite for grokking: tasks x models x optimizers, one training loop, plain results.

Map: the folders say what each part does; a wing imports only wings above it in this list.

    errors.py, cache.py   for every wing: the one bad-input error; what is built once and kept
    specs/        what a run is, before anything trains: registry (one decorator per component),
                  contracts, spec (resolve a spec; Spec, its typed form; its id, its run folder's
                  name), config (the train settings), presets, data (TaskData, what a task hands the
                  engine), cell
    results/      what a run leaves on disk, read back: rundir, result (result.json's provenance and
                  summary lines), weights, export, tuning_record (tuning.json)
    engine/       the training loop: build (suite.build: what a spec describes, built as a run trains
                  it), train (the loop, and the step in train_step), member (one run's folder from
                  claim to result), plan (which members stack), stack (a stack's tensors), stacked
                  (models on a member axis), updates (optimizers and filters of a stack), measures,
                  milestones, chance, hessian, precision
    components/   the built-in optimizers, samplers and gradient filters (tasks/ and models/, beside
                  suite/, hold the tasks and models)
    leaderboard/  boards, comparisons and their studies, from result.json files alone
    launch/       running cells: manifest (execute(cells), the one entry point, and a submission's
                  manifest and chunks), grid (grid files), submit (a grid by the grid command's
                  flags), local, slurm, tuning (the tuning protocol; spaces: its [tuning] table and
                  points; adding: a method added to a tuned board), tracking (Weights & Biases)
    probes/       the number probes' runner and plots (their task: tasks/number_probe.py, their model:
                  models/pretrained.py, their board page: leaderboard/studies/number_probes.py)
    bench/        the suite measured: speed and memory sections, the plain PyTorch loop it is held
                  against, cost (a spec's ms per step and decay per step, alike for every spec); the
                  GPU campaign that drives them is a development tool, tests/gpu_campaign.py
    commands/     the command line, one module per subcommand (cli.py puts them together)
    grids/        the shipped grid files

One word for each thing:

    task       a grokking task (tasks/), never Slurm's unit
    array task Slurm's unit: one index of a grid submission's array job, which runs one chunk
               (Slurm's own spellings keep the bare word: --cells-per-task, --cpus-per-task)
    cell       one spec with its seed, and the run folder it writes (specs/cell.py): what every
               launcher hands the loop; cell_id names a cell's seeds together (its spec without the seed)
    run        what a cell's training wrote: its run folder (spec.json, metrics.jsonl, result.json)
    group      the cells one call of the loop trains together: they differ only in their seed and
               their task's, optimizer's and filter's settings (at most `--stack K` of them)
    member     one cell as it trains in a stack
    stack      members trained as one model, their parameters on a leading member axis; a group
               trains as one stack, or as several where its members' shapes or start steps differ.
               Its size is result.json's stack_size, its cap --stack K (bench: --stacks, section
               "stacks"). The old word was "ensemble": --ensemble and --ensembles still work, said
               to be renamed, and files written before read as now (result.json's ensemble_size, a
               manifest's "ensemble", a bench report's "ensembles" section)
    chunk      one process's share of a grid submission: whole groups, in turn; an array task runs one
    table      on a board: the runs that differ only in their method and seed, a row per method
    problem    on a board, what runs share besides their method and seed (task, model, train
               conditions); a table holds a problem's rows, one per method
"""

import os as _os

# tasks/ and models/ are top-level folders of the repository (its fixed layout) that import as
# suite.tasks and suite.models, so that a user's own tasks/ or models/ folder cannot shadow them.
# A built wheel puts them inside suite/; a source checkout finds them beside it.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "tasks")) and _os.path.isfile(
    _os.path.join(_checkout, "tasks", "__init__.py")
):
    __path__.append(_checkout)

from importlib.metadata import PackageNotFoundError  # noqa: E402
from importlib.metadata import version as _version  # noqa: E402

from suite.errors import SuiteError  # noqa: E402
from suite.specs.contracts import GradFilter, Sampler  # noqa: E402 (after __path__ is complete)
from suite.specs.registry import (  # noqa: E402
    register_filter,
    register_model,
    register_optimizer,
    register_runner,
    register_sampler,
    register_task,
)
from suite.specs.spec import Spec  # noqa: E402

try:  # one source, pyproject.toml's version, as the installed package's metadata records it
    __version__ = _version("grokking-suite")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "GradFilter",
    "Sampler",
    "Spec",
    "SuiteError",
    "TaskData",
    "build",
    "register_filter",
    "register_model",
    "register_optimizer",
    "register_runner",
    "register_sampler",
    "register_task",
]


def __getattr__(name):  # these pull in torch: import them only when asked for
    if name == "TaskData":
        from suite.specs.data import TaskData

        return TaskData
    if name == "build":
        from suite.engine.build import build

        return build
    raise AttributeError(name)
