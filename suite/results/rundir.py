"""One directory per run: spec.json, metrics.jsonl, checkpoints, and result.json last.

Every file that marks progress is written to a temporary name and renamed into place, so a
reader (or a crash) never sees half a file; result.json appearing is what "finished" means.
A lock file keeps two processes off the same run; error.json records a crash, so a run folder
alone says whether its cell is done, running, failed, interrupted (a checkpoint, nobody on
it) or missing.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
import traceback
from pathlib import Path

from suite.errors import FAULTS, SuiteError
from suite.results.result import TRAIN, damage_of, has_full_spec, runner_of

CHECKPOINT, PREVIOUS, ERROR = "checkpoint.pt", "checkpoint.prev.pt", "error.json"
STATUSES = ("done", "running", "failed", "interrupted", "missing")
CODE = "code.json"  # the code identity of a run's components, written as it starts


class RunLocked(SuiteError):
    """Another process holds this run folder."""


class UnreadableFile(SuiteError, ValueError):
    """A file the suite wrote, found damaged (truncated, emptied, edited): bad input, one line."""


_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: Path, data: bytes | str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as err:  # a full disk: say which file could not be written
        Path(tmp).unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` survive a crash (the file's own fsync does not cover its name)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as err:  # a file system that cannot sync a directory has nothing more to give
        if err.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=2) + "\n")


def read_text(path: Path, errors: str = "strict") -> str:
    """A file's text. UnreadableFile (one line) for anything but a regular file: a FIFO would keep
    its reader waiting forever, a device might never end. Opened without blocking, then looked at."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableFile(f"{path} is not a regular file; the suite reads only files it could have written")
        return f.read().decode(errors=errors)


def read_json(path: Path):
    try:
        return json.loads(read_text(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UnreadableFile(f"{path} is not valid JSON ({err}); delete it if it is damaged") from None
    except RecursionError:  # thousands of nested brackets: no file the suite writes
        raise UnreadableFile(f"{path} is nested too deep to be a file of this suite; delete it if damaged") from None


def check_writable(path: Path) -> None:
    """Raise SuiteError unless path is a writable directory or could be made one; creates nothing."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:  # exists() is False under a file, too
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SuiteError(
            f"cannot write to {path}: {existing} is {'not a directory' if not existing.is_dir() else 'read-only'}"
        )
    longest = os.pathconf(existing, "PC_NAME_MAX")
    to_make = Path(path).absolute().relative_to(existing).parts
    if any(len(part.encode()) > longest for part in to_make):
        raise SuiteError(f"cannot write to {path}: File name too long (a name over {longest} bytes)")


def cannot_write(path: Path, err: OSError) -> Exception:
    """What to raise for a write to path that failed: the machine's fault (a full disk) stays an
    OSError naming the file (exit 1), any other reason is a path that cannot be used (exit 2)."""
    if err.errno in FAULTS:
        return OSError(err.errno, err.strerror, str(path))
    return SuiteError(f"cannot write to {path}: {err.strerror or err}")


def writable_dir(path: Path) -> Path:
    """Create the directory path (and its parents), or raise saying why it cannot be (cannot_write)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise cannot_write(path, err) from None
    return Path(path)


def _is_at(f, path: Path) -> bool:
    """Is the open file f the one at path (not one removed from there since it was opened)?"""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(f.fileno())
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = None
        self._made: list[Path] = []  # the folders lock() created, deepest first

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def finished(self) -> bool:
        """result.json is there (written last). One that cannot be read, or is no result of this
        suite (`{}`, a spec gone, a trained run's fields missing), is an error, not "done"."""
        path = self.path / "result.json"
        if not path.exists():
            return False
        result = read_json(path)
        if not has_full_spec(result):
            raise UnreadableFile(f"{path} is not a result (no full spec); delete it to run the cell again")
        if runner_of(result) == TRAIN and (damage := damage_of(result)):
            raise UnreadableFile(f"{path} is not a result ({damage}); delete it to run the cell again")
        return True

    def read_result(self) -> dict | None:
        """result.json as written, or None where there is none or it is no JSON object: for saying
        where a run was made (its commit, device), not whether it is done (`finished` checks that)."""
        try:
            result = read_json(self.path / "result.json")
        except (OSError, UnreadableFile):
            return None
        return result if isinstance(result, dict) else None

    def lock(self, tries: int = 20) -> None:
        """Hold an exclusive lock for the life of this process (released by the OS on exit).

        A few retries: `is_locked` (status) holds the lock for an instant, and must not make a
        run that starts at that moment believe somebody else is on it.
        """
        made = [p for p in (self.path, *self.path.parents) if not p.exists()]
        for _ in range(tries):
            writable_dir(self.path)
            try:
                f = open(self.path / ".lock", "a")
            except OSError as err:
                raise cannot_write(self.path / ".lock", err) from None
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                time.sleep(0.05)
                continue
            if _is_at(f, self.path / ".lock"):
                self._lock, self._made = f, made
                return
            f.close()  # its holder removed it (abandon, discard) while this one waited: lock the one there now
        raise RunLocked(f"another process is running this spec in {self.path}")

    def unlock(self) -> None:
        if self._lock:
            self._lock.close()
            self._lock = None

    def abandon(self) -> None:
        """Remove the folders lock() made, then unlock: for a run that failed before writing anything
        (bad input found as its stack was built), so that nothing is left behind. The lock file goes
        while still held, so a process waiting on it locks a new one (lock())."""
        if self._made and self._lock:
            (self.path / ".lock").unlink(missing_ok=True)
            for folder in self._made:
                try:
                    folder.rmdir()
                except OSError:  # not empty: something else lives there now
                    break
        self.unlock()

    def is_locked(self) -> bool:
        """True while some process runs here (what `status` calls running)."""
        try:
            f = open(self.path / ".lock")
        except (FileNotFoundError, NotADirectoryError):  # no run here (yet)
            return False
        with f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: status checks never block each other
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
        return False

    def status(self) -> str:
        """done | running | failed | interrupted | missing (see STATUSES)."""
        if self.finished:
            return "done"
        if self.is_locked():
            return "running"
        if (self.path / ERROR).exists():
            return "failed"
        if (self.path / CHECKPOINT).exists() or (self.path / PREVIOUS).exists():
            return "interrupted"
        return "missing"

    # --- failures: error.json says what went wrong, until the run finishes -----------------

    def record_failure(self, err: BaseException) -> None:
        """error.json, where it can be written (on a full disk the error itself goes on alone)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._write_failure(err)
        except OSError:
            pass

    def _write_failure(self, err: BaseException) -> None:
        write_json(
            self.path / ERROR,
            {
                "error": type(err).__name__,
                "message": str(err),
                "traceback": "".join(traceback.format_exception(err)),
                "host": socket.gethostname(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "slurm_job": os.environ.get("SLURM_JOB_ID"),
            },
        )

    def read_failure(self) -> dict | None:
        try:
            return read_json(self.path / ERROR)
        except (FileNotFoundError, ValueError):
            return None

    def clear_failure(self) -> None:
        (self.path / ERROR).unlink(missing_ok=True)

    # --- metrics: one JSON line per evaluation -------------------------------------------

    def read_code(self) -> dict | None:
        """code.json: the code identity of the run's components (suite/specs/code.py); None for a
        run made before it was recorded, or none made yet."""
        path = self.path / CODE
        if not path.exists():
            return None
        code = read_json(path)
        entries = code.items() if isinstance(code, dict) else None
        if entries is None or not all(_engine_entry(v) if k == "engine" else _code_entry(v) for k, v in entries):
            raise UnreadableFile(
                f"{path} is not a code record of this suite (per component: module, code_sha256; the engine's "
                "computation); delete the run folder to run it again"
            )
        return code

    def discard(self) -> None:
        """Remove the run folder and all it holds: a run made by other code, to run again. Under its
        lock: RunLocked while another process runs there, whose files must not go from under it."""
        self.lock()
        try:
            shutil.rmtree(self.path)
        finally:
            self.unlock()

    def read_metrics(self) -> list[dict]:
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return []
        lines = [line for line in read_text(path).splitlines() if line.strip()]
        records = []
        for i, line in enumerate(lines):
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                if i < len(lines) - 1:
                    raise UnreadableFile(
                        f"{path}: line {i + 1} is not valid JSON; the run's history is damaged "
                        "(delete the run folder to run it again)"
                    ) from None
                continue  # a process killed mid-write leaves a torn last line; resuming rewrites it
            if not (isinstance(record, dict) and type(record.get("step")) is int):
                raise UnreadableFile(
                    f"{path}: line {i + 1} is no evaluation of this suite (no step); the run's history is damaged "
                    "(delete the run folder to run it again)"
                )
            records.append(record)
        return records

    def restart_metrics(self, keep: list[dict]):
        """Rewrite metrics.jsonl with the lines to keep and open it for appending."""
        write_atomic(self.path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in keep))
        return open(self.path / "metrics.jsonl", "a")

    # --- checkpoints -----------------------------------------------------------------------

    def save_checkpoint(self, state: dict) -> None:
        """Keep the previous checkpoint until the new one is safely in place."""
        import torch

        buf = io.BytesIO()
        torch.save(state, buf)
        current = self.path / CHECKPOINT
        if current.exists():
            os.replace(current, self.path / PREVIOUS)
        write_atomic(current, buf.getvalue())

    def load_checkpoint(self, device) -> dict | None:
        """The newest readable checkpoint, or None if there is none; UnreadableFile if none of them
        can be read. weights_only: nothing arbitrary is unpickled."""
        import torch

        unreadable = {}  # name -> (error type, its first line)
        for name in (CHECKPOINT, PREVIOUS):
            path = self.path / name
            if not path.exists():
                continue
            try:
                state = torch.load(path, map_location=device, weights_only=True)
            except Exception as err:  # truncated or corrupted file
                unreadable[name] = (type(err).__name__, (str(err).splitlines() or [""])[0][:200])
                continue
            for bad, (kind, line) in unreadable.items():
                print(
                    f"warning: checkpoint {self.path / bad} is unreadable ({kind}: {line}); resuming from the last "
                    f"good checkpoint, {path} (step {state.get('step')})",
                    file=sys.stderr,
                )
            return state
        if unreadable:  # starting again would overwrite its metrics: the user decides
            why = ", ".join(f"{name}: {kind}" for name, (kind, _) in unreadable.items())
            raise UnreadableFile(
                f"no readable checkpoint in {self.path} ({why}); delete {' and '.join(unreadable)} "
                "to run it again from step 0"
            )
        return None

    def clean_temporary(self) -> None:
        """Drop the temporary files a process killed mid-write left (.NAME.XXXX.tmp: write_atomic's).
        Only the lock holder calls it: nobody else is writing here."""
        for path in self.path.glob(".*.tmp"):
            path.unlink(missing_ok=True)

    def drop_checkpoints(self) -> None:
        for name in (CHECKPOINT, PREVIOUS):
            (self.path / name).unlink(missing_ok=True)


def _engine_entry(entry) -> bool:
    return isinstance(entry, dict) and type(entry.get("computation")) is int


def _code_entry(entry) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("module"), str)
        and isinstance(entry.get("code_sha256"), str | None)
        and isinstance(entry.get("source_sha256"), str | None)
    )


def rng_states(device) -> dict:
    """torch's global RNG states, for a checkpoint (the run's own generator is saved apart)."""
    import torch

    states = {"torch_rng": torch.get_rng_state()}
    if getattr(device, "type", None) == "cuda":
        states["cuda_rng"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(state: dict, device) -> None:
    import torch

    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"].cpu())
    if "cuda_rng" in state and getattr(device, "type", None) == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"].cpu(), device)


def result_files(root: Path) -> list[Path]:
    """Every result.json under root, sorted, following links to folders (a root assembled from links
    to other roots' runs), each real folder once."""
    seen, found = set(), []
    for here, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        if real in seen:  # a link back up, or a second link to one folder
            dirs.clear()
            continue
        seen.add(real)
        if "result.json" in files:
            found.append(Path(here) / "result.json")
    return sorted(found)
