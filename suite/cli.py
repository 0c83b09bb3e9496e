"""Command line: `python -m suite COMMAND` (`--help` lists them, in suite/commands/__init__.py's order).

Each subcommand is a module of suite/commands/ (its flags and what it does); this module puts
them together, and turns bad input (SuiteError) into one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time

from suite.commands import COMMANDS
from suite.errors import FAULTS, SuiteError, missing_extra


def runtime_defaults() -> None:
    """Environment defaults torch reads when it is imported (threads, huge pages, the CPU kernels):
    main() sets them first, so `python -m suite` and the grok-suite console script (which calls
    main() directly) run alike. They are the command line's, not the library's: an import must not
    change how the importing program's own threads run."""
    # Stacks allocate activations and gradients of tens of MB every step; glibc hands blocks
    # that large straight back to the kernel, so each step would page-fault them in again. Huge
    # pages (torch's allocator madvises blocks >= 2 MB) keep them; results are unchanged (it is
    # where memory lives, not what is computed).
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.update(thread_defaults(os.environ, cores, busy_cores()))
    os.environ.update(kernel_defaults(os.environ, cpu_flags()))


# torch's vectorized kernels (ATen), oneDNN and MKL each pick their code by the CPU's instruction set,
# and each path rounds differently: on one AVX2 machine ATen's plain path or MKL's compatible one moved
# a run's loss by ~1% within 50 steps, Adam amplifies it, and a run made on another machine (same
# torch, one thread) grokked 200 steps later when replayed. Pinned to AVX2, the widest set x86 servers
# of the last decade share, machines of one vendor run the same code with or without AVX-512 (MKL's
# AVX2 branch is Intel's; on AMD MKL keeps its own choice). MKL agrees across vendors only on its
# COMPATIBLE branch, which made a stack of 8 MLP runs 2.7x slower here: the user's to choose (README).
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def kernel_defaults(environ, flags: set[str] | None) -> dict[str, str]:
    """The CPU kernels pinned to AVX2 (PINNED) where the CPU has AVX2 and FMA: ATen trusts the setting,
    and on a CPU without them would stop at an illegal instruction. Where it cannot tell (flags None:
    not Linux) nothing is pinned. A setting the user made stands (ATEN_CPU_CAPABILITY=avx512 runs
    faster on such a machine, in numbers only such machines replay)."""
    if flags is None or not {"avx2", "fma"} <= flags:
        return {}
    return {key: value for key, value in PINNED.items() if key not in environ}


def cpu_flags() -> set[str] | None:
    """The CPU's instruction-set flags (/proc/cpuinfo's first "flags" line); None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    return None if line is None else set(line.split(":", 1)[1].split())


def thread_defaults(environ, cores: int, busy: int | None) -> dict[str, str]:
    """torch's threads for this process, by the cores other processes are computing on now. On an
    idle machine torch's own defaults (a thread a core, waiting threads spinning) are the fastest
    for a run alone (a passive wait cost it ~25%, 18.3 vs 14.6 s) and what the bench's plain loop
    runs with. Beside other work, spinning threads steal the cores that work needs and a run
    crawled 4-18x slower: then a thread per free core (at least one) that sleeps while it waits,
    as the local grid's workers run. A choice the user made (OMP_NUM_THREADS, OMP_WAIT_POLICY) stands."""
    if busy is None or busy <= 0 or {"OMP_NUM_THREADS", "OMP_WAIT_POLICY"} & set(environ):
        return {}
    threads = str(max(1, cores - busy))
    return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OMP_WAIT_POLICY": "PASSIVE"}


def busy_cores(samples: int = 5, apart_s: float = 0.01) -> int | None:
    """How many threads of other processes are running now: the kernel's count of runnable threads
    (/proc/loadavg's fourth field) less this one, the least of a few samples 10 ms apart, so that
    a moment's work (a shell command) is not taken for a shared machine. Not the load average: it
    lags by a minute, and a run started right after another would take the last one's load for
    its own. None where there is no /proc/loadavg (not Linux): torch's defaults then."""
    counts = []
    try:
        for i in range(samples):
            if i:
                time.sleep(apart_s)
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]))
    except (OSError, ValueError, IndexError):
        return None
    return min(counts) - 1


# The core install's modules (pyproject.toml's dependencies, by import name): a Python without them
# is not the suite's environment, and every command would fail on them, or (`list`) half work.
CORE_MODULES = (
    "torch",
    "torchvision",
    "einops",
    "pandas",
    "pyarrow",
    "tqdm",
    "PIL",
    "numpy",
    "safetensors",
    "scipy",
    "matplotlib",
    "threadpoolctl",
)


def missing_core() -> str | None:
    """One line for a Python that lacks the core install (the venv not active), or None."""
    missing = [name for name in CORE_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    more = f" (and {len(missing) - 1} more of its requirements)" if len(missing) > 1 else ""
    return (
        f"this Python ({sys.executable}) has no {missing[0]}{more}: the suite runs in the environment it was "
        "installed into; activate it (source .venv/bin/activate) or run .venv/bin/python -m suite"
    )


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
    if (missing := missing_core()) is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a command queues to run again (tune --follow)
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
