"""The subcommands of `python -m suite`, one module each: `add(sub)` declares its flags, `run(args)`
does it. suite/cli.py puts them together; COMMANDS is their order in `--help`."""

COMMANDS = (
    "list",
    "run",
    "grid",
    "tune",
    "status",
    "leaderboard",
    "compare",
    "replay",
    "export",
    "track",
    "bench",
    "chunk",
)
