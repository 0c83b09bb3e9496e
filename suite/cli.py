"""Command line: `python -m suite list | run | grid | status | leaderboard | export | bench`.

Each subcommand is a module of suite/commands/ (its flags and what it does); this module puts
them together, and turns bad input (SuiteError) into one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from suite.commands import COMMANDS
from suite.errors import FAULTS, SuiteError, missing_extra


def runtime_defaults() -> None:
    """Environment defaults torch reads when it is imported: main() sets them first, so
    `python -m suite` and the grok-suite console script (which calls main() directly) run alike."""
    # No OMP_WAIT_POLICY here: passive waiting cost a run alone ~25% (18.3 vs 14.6 s); the places
    # where runs share cores (local workers, the sbatch script, the tests) ask for it themselves.
    # Ensembles allocate activations and gradients of tens of MB every step; glibc hands blocks
    # that large straight back to the kernel, so each step page-faults them in again. Huge pages
    # (torch's allocator madvises blocks >= 2 MB) made a K = 32 step 1.4x faster here; results
    # are unchanged (it is where memory lives, not what is computed).
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad flag or value said in one line (argparse prints its usage block first):
    the command and what is wrong, exit code 2. --help still shows the usage. Subcommands' parsers
    are of their parent's class, so every one of them says it so."""

    def error(self, message: str):
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def make_parser() -> argparse.ArgumentParser:
    from suite import __version__

    parser = OneLineParser(prog="python -m suite", description="A grokking benchmark suite.")
    parser.add_argument("--version", action="version", version=f"grokking-suite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        command = importlib.import_module(f"suite.commands.{name}")
        command.add(sub)
        sub.choices[name].set_defaults(func=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    runtime_defaults()  # before any command imports torch
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        from suite.commands.run import dotted_settings

        pairs = dotted_settings(extra) if args.command == "run" else None
        if pairs is None:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")  # what parse_args says
        args.set += pairs
    return guarded(args.func, args)


def guarded(command, *args) -> int:
    """command(*args), its exit code, with what the user can act on said in one line on stderr and
    the project's exit code: bad input (SuiteError) 2, an extra not installed 2, a path that cannot
    be used 2 or a full disk 1 (OSError), Ctrl-C outside a training loop 130."""
    try:
        return command(*args)
    except SuiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `suite list | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ModuleNotFoundError as err:
        if (missing := missing_extra(err)) is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a training loop (a run's loop checkpoints and says so itself)
        print("error: interrupted (Ctrl-C); what had finished is kept", file=sys.stderr)
        return 130
    except OSError as err:  # a path that cannot be used (bad input), or a full disk (a fault): one line either way
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {where}{err.strerror or err}", file=sys.stderr)
        return 1 if err.errno in FAULTS else 2
