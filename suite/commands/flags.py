"""Flags that several subcommands share, and old names of flags kept working."""

from __future__ import annotations

import argparse
import sys


class OldName(argparse.Action):
    """A flag's old name, kept working: hidden from --help, it stores into the new flag's dest and
    says once, on stderr, that it is now the new flag (`--ensemble is now --stack`)."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs):
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.new, self.said = new, False  # a parser is made per command line: said once per command

    def __call__(self, parser, namespace, values, option_string=None):
        if not self.said:
            self.said = True
            print(f"{option_string} is now {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def old_name(p, old: str, new: str, **kwargs) -> None:
    """Accept `old` as `new` (same dest, type and metavar): a renamed flag that old scripts still pass."""
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(old, action=OldName, new=new, dest=dest, default=argparse.SUPPRESS, **kwargs)


def device(p) -> None:
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")


def root(p) -> None:
    p.add_argument("--root", default="runs", help="where run folders go (default runs/)")


def torch_compile(p) -> None:
    p.add_argument(
        "--compile",
        action="store_true",
        help="the training step's forward through torch.compile (default off: on this suite's small "
        "models it did not pay for its compile time on CPU; see `suite bench`)",
    )


def experiment(p) -> None:
    p.add_argument(
        "--experiment",
        action="append",
        default=[],
        metavar="NAME",
        help="only the cells of this [[experiment]] block of the grid file (repeatable; default all)",
    )


def wandb(p) -> None:
    from suite.launch.tracking import MODES, default_mode, mode_of

    p.add_argument(
        "--wandb",
        type=mode_of,
        choices=MODES,
        default=default_mode(),
        help="Weights & Biases tracking (default from WANDB_MODE, else online under a sweep agent, else off)",
    )


def backend(p):
    """How cells run: grid's flags, which `tune` shares. Returns the group of Slurm's flags."""
    p.add_argument("--backend", choices=("local", "slurm"), default="local")
    rerun_changed(p)
    p.add_argument("--workers", type=int, default=1, help="local: processes at once, one group each (default 1)")
    p.add_argument(
        "--stack",
        type=int,
        default=8,
        metavar="K",
        help="at most K cells in a group, trained as one stack (cells that differ only in their seed and "
        "their task's, optimizer's and filter's settings; default 8: on 2 CPU "
        "cores K = 8 gave the most runs per hour, see `suite bench`; on a GPU try 32; "
        "1: every cell on its own)",
    )
    old_name(p, "--ensemble", "--stack", type=int, metavar="K")
    root(p)
    device(p)
    p.add_argument(
        "--dry-run", action="store_true", help="local: list the cells to run; slurm: print the sbatch script"
    )
    torch_compile(p)
    wandb(p)
    sl = p.add_argument_group("slurm (defaults from the grid file's [slurm] table)")
    sl.add_argument("--partition")
    sl.add_argument("--time", help="time limit per array task, e.g. 4:00:00")
    sl.add_argument("--gpus", help="GPUs per array task, e.g. 1 or a100:1")
    sl.add_argument("--cpus", type=int, help="CPUs per array task (also torch threads)")
    sl.add_argument("--mem", help="memory per array task, e.g. 8G")
    sl.add_argument("--account")
    sl.add_argument("--max-parallel", type=int, help="array tasks running at once")
    sl.add_argument("--cells-per-task", type=int, help="cells each array task runs in turn (default 1)")
    sl.add_argument(
        "--max-requeues", type=int, help="times an array task requeues itself after a checkpointed stop (default 3)"
    )
    sl.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an extra #SBATCH line, e.g. --sbatch=--constraint=a100 (repeatable)",
    )
    sl.add_argument("--template", help="sbatch template (default slurm/array.sbatch)")
    return sl


def rerun_changed(p) -> None:
    p.add_argument(
        "--rerun-changed",
        action="store_true",
        help="run again, from step 0, a cell whose run folder was made by other code of one of its components "
        "(its module's source changed); without it such a folder stops the command",
    )
