"""`python -m suite bench`: step times, FLOP/s against the matmul limit, stacks' runs per hour, probe and compile."""

from __future__ import annotations

import sys

from suite.commands import flags


def add(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="measure step times, FLOP/s against the matmul limit, stacks' runs/hour, probe and compile",
        description="Measure the suite on this machine: a table on stdout, progress on stderr. The last "
        "stdout line is the path of the JSON report.",
    )
    flags.device(p)
    p.add_argument("--out", help="JSON report (default runs/bench/bench-<commit>-<UTC stamp>.json)")
    p.add_argument("--steps", type=int, help="loop length of the whole-step and stack runs (default 600; quick 20)")
    p.add_argument("--stacks", metavar="K,...", help="stack sizes K, comma-separated (default 1,8,32; quick 1,2)")
    flags.old_name(p, "--ensembles", "--stacks")
    p.add_argument(
        "--skip",
        default="",
        help="sections to skip, comma-separated: matmul,plain,steps,profile,stacks,precision,probe,compile",
    )
    p.add_argument(
        "--quick", action="store_true", help="the same code paths on a tiny task in seconds (skips probe and compile)"
    )
    p.add_argument(
        "--repeats",
        type=int,
        help="suite runs and plain loops in the plain section, interleaved; the ratio is "
        "of the fastest of each (default 3; quick 1)",
    )


def run(args) -> int:
    from suite.bench import Options, run_bench
    from suite.bench.table import format_report
    from suite.engine.train import resolve_device

    options = Options(steps=args.steps, stacks=args.stacks, skip=args.skip, quick=args.quick, repeats=args.repeats)
    device = resolve_device(args.device)  # every flag is checked before anything runs
    report, path = run_bench(device, options, args.out)  # written as it goes: an interruption keeps what was measured
    print(format_report(report))
    print(path)
    if "stopped" in report:
        print(f"stopped by {report['stopped']}: the report holds what was measured before", file=sys.stderr)
        return 130 if report["stopped"] == "SIGINT" else 3  # as `suite run` stopped at a checkpoint
    return 0
