"""One directory per run: spec.json, metrics.jsonl, checkpoints, and result.json last.

Every file that marks progress is written to a temporary name and renamed into place, so a
reader (or a crash) never sees half a file; result.json appearing is what "finished" means.
A lock file keeps two processes off the same run.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from suite.registry import SuiteError

CHECKPOINT, PREVIOUS = "checkpoint.pt", "checkpoint.prev.pt"


def write_atomic(path: Path, data: bytes | str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=2) + "\n")


def read_json(path: Path):
    return json.loads(Path(path).read_text())


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = None

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def finished(self) -> bool:
        return (self.path / "result.json").exists()

    def lock(self) -> None:
        """Hold an exclusive lock for the life of this process (released by the OS on exit)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.path / ".lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SuiteError(f"another process is running this spec in {self.path}") from None

    def unlock(self) -> None:
        if self._lock:
            self._lock.close()
            self._lock = None

    def is_locked(self) -> bool:
        """True while some process runs here (what `status` calls running)."""
        if not (self.path / ".lock").exists():
            return False
        with open(self.path / ".lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
        return False

    # --- metrics: one JSON line per evaluation -------------------------------------------

    def read_metrics(self) -> list[dict]:
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def restart_metrics(self, keep: list[dict]):
        """Rewrite metrics.jsonl with the lines to keep and open it for appending."""
        write_atomic(self.path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in keep))
        return open(self.path / "metrics.jsonl", "a")

    # --- checkpoints -----------------------------------------------------------------------

    def save_checkpoint(self, state: dict) -> None:
        """Keep the previous checkpoint until the new one is safely in place."""
        buf = io.BytesIO()
        torch.save(state, buf)
        current = self.path / CHECKPOINT
        if current.exists():
            os.replace(current, self.path / PREVIOUS)
        write_atomic(current, buf.getvalue())

    def load_checkpoint(self, device) -> dict | None:
        """The newest readable checkpoint, or None. weights_only: nothing arbitrary is unpickled."""
        for name in (CHECKPOINT, PREVIOUS):
            path = self.path / name
            if not path.exists():
                continue
            try:
                return torch.load(path, map_location=device, weights_only=True)
            except Exception as err:  # truncated or corrupted file
                print(f"warning: checkpoint {path} is unreadable ({type(err).__name__}); "
                      "falling back to the previous good state", file=sys.stderr)
        return None

    def drop_checkpoints(self) -> None:
        for name in (CHECKPOINT, PREVIOUS):
            (self.path / name).unlink(missing_ok=True)
