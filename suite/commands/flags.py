"""Flags that several subcommands share."""

from __future__ import annotations


def device(p) -> None:
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")


def root(p) -> None:
    p.add_argument("--root", default="runs", help="where run directories go (default runs/)")


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
    from suite.tracking import MODES, default_mode, mode_of

    p.add_argument(
        "--wandb",
        type=mode_of,
        choices=MODES,
        default=default_mode(),
        help="Weights & Biases tracking (default from WANDB_MODE, else online under a sweep agent, else off)",
    )
