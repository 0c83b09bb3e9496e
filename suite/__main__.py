import os

# Several runs often share 2 cores (workers, Slurm jobs, tests): with OpenMP's default
# busy-waiting a small step gets 7-14x slower; passive waiting costs ~5% when idle.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Ensembles allocate activations and gradients of tens of MB every step; glibc hands blocks
# that large straight back to the kernel, so each step page-faults them in again. Huge pages
# (torch's allocator madvises blocks >= 2 MB) made a K = 32 step 1.4x faster here; results
# are unchanged (it is where memory lives, not what is computed).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from suite.cli import main  # noqa: E402

raise SystemExit(main())
