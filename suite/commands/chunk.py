"""`python -m suite chunk MANIFEST I` (the backends' own): run chunk I of a grid submission."""

from __future__ import annotations


def add(sub) -> None:
    p = sub.add_parser("chunk", help="(used by the backends) run chunk I of a grid manifest")
    p.add_argument("manifest")
    p.add_argument("index", type=int)


def run(args) -> int:
    from suite.launch.manifest import run_chunk

    return run_chunk(args.manifest, args.index)
