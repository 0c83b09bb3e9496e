import os

# Several runs often share 2 cores (workers, Slurm jobs, tests): with OpenMP's default
# busy-waiting a small step gets 7-14x slower; passive waiting costs ~5% when idle.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from suite.cli import main  # noqa: E402

raise SystemExit(main())
